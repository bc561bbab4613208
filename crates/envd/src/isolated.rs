//! Running the daemon isolated (`e2b-envd --isolate`) from another program, without the
//! command-line types: [`check`] whether this machine can, [`spawn`] the daemon binary
//! isolated, and [`enter_if_child`] at the top of a `main` that can be re-executed as the
//! sandbox. `e2b::Sandbox::local_isolated()` and `e2b run` use these. See docs/isolation.md.

use std::io::BufRead as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::error::DaemonError;

/// Builds the sandbox when this process is the re-execution that `--isolate` starts, and then
/// never returns; returns immediately otherwise. Call it first thing in `main`, before any
/// thread (tokio runtime) starts.
pub fn enter_if_child() {
    e2b_isolation::run_if_child();
}

/// Whether this machine can run the daemon isolated with `network` (`none`, `internet`,
/// `host`): user namespaces, a NAT helper for `internet` (and, as a non-root user, access to
/// `/dev/net/tun`).
///
/// # Errors
///
/// [`DaemonError::Config`] naming the missing feature (and the package or sysctl) and how to
/// run without isolation, or naming an unknown `network`.
pub fn check(network: &str) -> Result<(), DaemonError> {
    let network: e2b_isolation::Network = network.parse().map_err(DaemonError::Config)?;
    e2b_isolation::probe()
        .check(network)
        .map_err(|e| DaemonError::Config(e.to_string()))
}

/// Starts `program [prefix…] --isolate --port 0 --bind 127.0.0.1 [extra…]` (the daemon
/// binary, isolated, as a child process bound to a free loopback port) and returns its URL and
/// the child. `program` is `e2b-envd`, or a program that runs the daemon after `prefix` (`e2b`
/// with `["envd"]`). The child gets SIGKILL when this process exits (parent-death signal),
/// which takes its sandbox along; stop it earlier with SIGTERM. Blocking; as a non-root user
/// the sandbox has a single account (see docs/isolation.md, "Unprivileged").
///
/// # Errors
///
/// [`DaemonError::Io`] when the child cannot start or prints no URL (its stderr, inherited,
/// says why).
pub fn spawn(
    program: &Path,
    prefix: &[&str],
    extra: &[String],
) -> Result<(String, Child), DaemonError> {
    spawn_with_env(program, prefix, extra, &[])
}

/// Like [`spawn`], with extra environment for the child (for example `E2B_ENVD_ACCESS_TOKEN`,
/// which stays out of its command line). The child is started from a long-lived thread, so its
/// parent-death signal fires only when this process exits.
///
/// # Errors
///
/// As [`spawn`].
pub fn spawn_with_env(
    program: &Path,
    prefix: &[&str],
    extra: &[String],
    env: &[(String, String)],
) -> Result<(String, Child), DaemonError> {
    let mut cmd = Command::new(program);
    cmd.args(prefix)
        .args(["--isolate", "--port", "0", "--bind", "127.0.0.1"])
        .args(extra)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = e2b_isolation::spawn_tied_to_process(cmd).map_err(error)?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = std::io::BufReader::new(out).read_line(&mut line);
    }
    let url = line.trim().to_string();
    if !url.starts_with("http://") {
        let _ = child.kill();
        let status = child.wait()?;
        return Err(error(format!(
            "the isolated daemon did not start ({status}); see its messages above"
        )));
    }
    Ok((url, child))
}

/// An isolation failure as the daemon's error (the isolation crate's own error type stays out
/// of this crate's API).
pub(crate) fn error(e: impl std::fmt::Display) -> DaemonError {
    DaemonError::Io(std::io::Error::other(e.to_string()))
}
