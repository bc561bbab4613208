//! `e2b serve`: E2B's sandbox API on this machine (see the `e2b-serve` crate), and the envd each
//! of its sandboxes runs.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

/// The program each sandbox of `e2b serve` runs as its envd when it sits beside `e2b` (and is of
/// the same version): a small binary that holds only envd, so an idle sandbox maps a fraction
/// of what the whole `e2b` binary would. Without it, sandboxes run `e2b serve envd`.
pub const SANDBOX_ENVD_BIN: &str = "e2b-serve-envd";

/// How long `e2b serve` waits for [`SANDBOX_ENVD_BIN`]` --version` before running its own envd.
const VERSION_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `e2b serve` (or its internal mode, `e2b serve envd …`) and returns the exit code. Each
/// sandbox runs [`SANDBOX_ENVD_BIN`] when it is beside this program and answers `--version`
/// with this version, and `e2b serve envd` otherwise (`--envd-program` overrides both).
///
/// # Errors
///
/// The message of [`e2b_serve::ServeError`] when a port cannot be bound or the key stored.
pub async fn serve(mut args: e2b_serve::ServeArgs) -> Result<i32, String> {
    if args.envd_program.is_none() && args.internal.is_none() {
        args.envd_program = sandbox_envd_beside_this_program().await;
    }
    // `e2b`'s `main` enters a sandbox before any thread starts (`enter_sandbox_if_child`), so
    // `e2b serve` can run isolated sandboxes (`--isolation auto` picks them where the machine
    // supports it).
    e2b_serve::run_cli_with(args, &["serve"], true)
        .await
        .map_err(|e| e.to_string())
}

/// [`SANDBOX_ENVD_BIN`] in this program's directory, if it is there and is this version.
async fn sandbox_envd_beside_this_program() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.join(SANDBOX_ENVD_BIN);
    if !path.is_file() {
        return None;
    }
    match check_version(&path).await {
        Ok(()) => Some(path),
        Err(why) => {
            eprintln!(
                "e2b serve: not using {}: {why}; sandboxes run `{} serve envd` instead \
                 (reinstall both binaries together, or pass --envd-program)",
                path.display(),
                exe.display()
            );
            None
        }
    }
}

/// Checks that `path --version` prints `e2b-serve-envd <this version>` within the time limit.
async fn check_version(path: &Path) -> Result<(), String> {
    let expected = format!("{SANDBOX_ENVD_BIN} {}", env!("CARGO_PKG_VERSION"));
    let mut command = tokio::process::Command::new(path);
    command
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(VERSION_CHECK_TIMEOUT, command.output())
        .await
        .map_err(|_| {
            format!(
                "`--version` did not answer within {} s",
                VERSION_CHECK_TIMEOUT.as_secs()
            )
        })?
        .map_err(|e| format!("cannot run it: {e}"))?;
    let answer = String::from_utf8_lossy(&output.stdout);
    let answer = answer.trim();
    if output.status.success() && answer == expected {
        Ok(())
    } else {
        Err(format!(
            "`--version` answered {answer:?} ({}), not {expected:?}",
            output.status
        ))
    }
}

/// The arguments of a sandbox's envd, as `e2b serve` runs it.
#[derive(Debug, clap::Parser)]
#[command(version, about = "A sandbox's envd, as `e2b serve` runs it (internal)")]
struct SandboxEnvd {
    #[command(flatten)]
    args: e2b_envd::EnvdArgs,
}

/// `main` of a sandbox's envd (`e2b-serve-envd …`, or `e2b serve envd …` with `name` `e2b serve
/// envd`): parses `args` (without the program name) as envd's flags and serves on one thread,
/// since a sandbox's envd serves one sandbox and each idle sandbox should cost little memory.
/// Call `e2b_envd::isolated::enter_if_child()` before it, first thing in `main`.
pub fn sandbox_envd_main(name: &'static str, args: impl IntoIterator<Item = OsString>) -> ExitCode {
    use clap::{CommandFactory as _, FromArgMatches as _};
    let matches = SandboxEnvd::command()
        .name(name)
        .bin_name(name)
        .get_matches_from(std::iter::once(OsString::from(name)).chain(args));
    let envd = match SandboxEnvd::from_arg_matches(&matches) {
        Ok(envd) => envd,
        Err(e) => e.exit(),
    };
    run_main(tokio::runtime::Builder::new_current_thread(), async move {
        let result = e2b_envd::run_cli(envd.args).await.map(|()| 0);
        (name, result.map_err(|e| e.to_string()))
    })
}

/// Runs `job` (a command's name and outcome) on a runtime from `builder` with logging set up
/// (`E2B_LOG`, default `warn`, to stderr), and turns its outcome into the exit code: an error
/// is printed as `<name>: <error>` (`name` as `e2b run`).
pub fn run_main(
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
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}
