//! `e2b acp`: an ACP agent on this process's stdin/stdout (for an editor such as Zed) whose real
//! agent runs in the sandbox.

use std::io::{Read as _, Write as _};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::io::StreamReader;

use e2b_acp::{AcpError, AcpOptions, run_bridge_until, start_acp_transport};
use tokio::signal::unix::{SignalKind, signal};

use crate::args::AcpArgs;
use crate::run::{CliError, command_line, exit_code};

/// Completes on SIGTERM or SIGINT, with the signal number; never when the handlers cannot be
/// installed (then the default action applies).
async fn shutdown_signal() -> i32 {
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => libc_signal::SIGTERM,
        _ = int.recv() => libc_signal::SIGINT,
    }
}

mod libc_signal {
    pub(super) const SIGINT: i32 = 2;
    pub(super) const SIGTERM: i32 = 15;
}

/// This process's stdin, read on a thread of its own. `tokio::io::stdin()` reads on the blocking
/// pool, and a read there cannot be cancelled: with an editor that keeps stdin open, the runtime
/// would wait for it forever after the agent ended. A detached thread ends with the process.
type StdinReader = StreamReader<ReceiverStream<std::io::Result<Bytes>>, Bytes>;

fn spawn_stdin_reader() -> StdinReader {
    let (tx, rx) = mpsc::channel(4);
    let spawned = std::thread::Builder::new()
        .name("e2b-acp-stdin".to_owned())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let item = match stdin.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => Ok(Bytes::copy_from_slice(&buf[..n])),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => Err(e),
                };
                let failed = item.is_err();
                if tx.blocking_send(item).is_err() || failed {
                    break;
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "could not start the stdin reader; treating stdin as closed");
    }
    StreamReader::new(ReceiverStream::new(rx))
}

/// How long `e2b acp` gives the agent to exit after the editor's EOF (passed on as the agent's
/// EOF) in all: about 2¼ s of grace (three quarters), then the kill.
const EOF_STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// `e2b acp`: serves ACP on stdin/stdout with the agent running in the sandbox. Returns the exit
/// code to exit with.
///
/// - The agent's stderr is copied to this process's stderr as it arrives (an editor's log).
/// - At EOF on stdin the agent is stopped: EOF to it, and killed if it has not exited after a
///   grace period of about 2 s (a 3 s stop); that exits 0. On SIGTERM
///   or SIGINT it is killed at once; either way this returns only once it is gone. A signal
///   exits with 128 + its number.
/// - When the agent fails, this says why on stderr (exit code or signal, the message size limit,
///   a broken sandbox stream) and exits with the agent's code (128 + N for signal N).
///
/// # Errors
///
/// [`CliError::Sandbox`] when the sandbox cannot be opened, [`CliError::Acp`] when the agent
/// cannot be started or the bridge fails for another reason than the agent's own exit.
///
/// # Cancel safety
///
/// Dropping the future kills the agent (the transport owns it).
pub async fn acp(args: AcpArgs) -> Result<i32, CliError> {
    // Isolated, the agent's own program and package directories (outside /usr) are shown
    // read-only in the sandbox, so agents installed under host paths run there.
    let shown = e2b_isolation::command_host_paths(&args.command);
    let sandbox = crate::run::open_sandbox_with_mounts(&args.sandbox, &shown).await?;
    let mut opts = AcpOptions::default()
        .on_stderr(|b| {
            let mut err = std::io::stderr().lock();
            err.write_all(b)?;
            err.flush()?;
            Ok(())
        })
        .stop_timeout(EOF_STOP_TIMEOUT)
        .envs(args.envs.iter().cloned());
    if let Some(cwd) = &args.cwd {
        opts = opts.cwd(cwd.clone());
    }
    let stop_timeout = EOF_STOP_TIMEOUT;
    let display = args.command.join(" ");

    let signalled = std::sync::Arc::new(std::sync::atomic::AtomicI32::new(0));
    let flag = signalled.clone();
    let shutdown = async move {
        let sig = shutdown_signal().await;
        flag.store(sig, std::sync::atomic::Ordering::Release);
    };
    let mut shutdown = std::pin::pin!(shutdown);
    let started = tokio::select! {
        r = start_acp_transport(sandbox.commands(), command_line(&args.command), opts) => Some(r),
        () = &mut shutdown => None,
    };
    let exit = match started {
        None => Ok(None),
        Some(Err(e)) => Err(e),
        Some(Ok(transport)) => run_bridge_until(
            spawn_stdin_reader(),
            tokio::io::stdout(),
            transport,
            stop_timeout,
            shutdown,
        )
        .await
        .map(Some),
    };
    let _ = sandbox.kill().await;
    let sig = signalled.load(std::sync::atomic::Ordering::Acquire);
    if sig != 0 {
        eprintln!("e2b acp: received signal {sig}; the agent `{display}` was killed");
        return Ok(128 + sig);
    }
    match exit {
        // Killed by the stop after the editor's EOF: what the editor asked for.
        Ok(Some(exit)) if exit.killed => {
            eprintln!(
                "e2b acp: the agent `{display}` did not exit after the end of input; it was killed"
            );
            Ok(0)
        }
        Ok(Some(exit)) => Ok(exit_code(exit.code, exit.signal)),
        Ok(None) => Ok(1),
        // The agent's own failure: say so and exit as it did (its stderr already reached ours).
        Err(AcpError::AgentFailed { code, signal, .. }) => {
            let how = match (code, signal) {
                (_, Some(s)) => format!("was killed by signal {s}"),
                (Some(c), None) => format!("exited with code {c}"),
                (None, None) => "ended with an unknown status".to_owned(),
            };
            eprintln!("e2b acp: the agent `{display}` {how}");
            Ok(exit_code(code, signal))
        }
        // main prints it ("e2b acp: acp: …"): a typed reason (message too large, the sandbox
        // stream broke, the agent could not start).
        Err(e) => Err(e.into()),
    }
}
