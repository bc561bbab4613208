//! The bridge: an ACP agent on its own stdin/stdout (for an editor such as Zed) whose real agent
//! runs behind the transport, in the sandbox, with the same rewrite and interception.

use std::pin::pin;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use crate::error::{AcpError, Direction};
use crate::framing::{self, LineSplitter};
use crate::transport::{AcpTransport, AgentExit};

/// Run the bridge until the agent ends: lines read from `input` (the editor) go to the agent
/// (`initialize` rewritten), messages from the agent go to `output` (`fs/*` and `terminal/*`
/// requests were answered in the transport and never reach the editor). At EOF on `input` the agent
/// is stopped with `stop_timeout` (EOF, then kill). Returns how the agent ended
/// ([`AcpTransport::wait`]).
///
/// An editor message over the limit is not sent; if it is a request the editor gets an error
/// response for it.
///
/// # Errors
///
/// The errors of [`AcpTransport::wait`] (the agent failed), [`AcpError::MessageTooLarge`] for an
/// editor line over the limit (the stream cannot be resynchronised), [`AcpError::Process`] when
/// the output could not be written.
///
/// # Cancel safety
///
/// Dropping the future drops the transport, which kills the agent.
pub async fn run_bridge<R, W>(
    input: R,
    output: W,
    transport: AcpTransport,
    stop_timeout: std::time::Duration,
) -> Result<AgentExit, AcpError>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    run_bridge_until(
        input,
        output,
        transport,
        stop_timeout,
        std::future::pending::<()>(),
    )
    .await
}

/// [`run_bridge`] that also ends when `shutdown` completes (a signal): the agent is killed at
/// once and its end is waited for, so nothing keeps running in the sandbox.
///
/// # Errors
///
/// As [`run_bridge`].
///
/// # Cancel safety
///
/// As [`run_bridge`].
pub async fn run_bridge_until<R, W, S>(
    input: R,
    output: W,
    transport: AcpTransport,
    stop_timeout: std::time::Duration,
    shutdown: S,
) -> Result<AgentExit, AcpError>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
    S: std::future::Future<Output = ()> + Send,
{
    let mut shutdown = pin!(shutdown);
    let mut output = output;
    let (reply_tx, mut reply_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let t = &transport;
    // Set once the editor's input ended and the agent is being stopped.
    let stopping = std::sync::atomic::AtomicBool::new(false);
    let stopping = &stopping;

    let input_pump = async move {
        let mut input = input;
        let mut splitter = match LineSplitter::new(t.max_message_bytes()) {
            Ok(s) => s.with_direction(Direction::ToAgent),
            Err(e) => return Err(e),
        };
        let mut buf = BytesMut::with_capacity(64 * 1024);
        loop {
            buf.reserve(64 * 1024);
            let n = input
                .read_buf(&mut buf)
                .await
                .map_err(|e| AcpError::process("reading the bridge's input", e))?;
            if n == 0 {
                if let Some(Ok(line)) = splitter.finish() {
                    send_line(t, &line, &reply_tx).await?;
                }
                break;
            }
            splitter.push_bytes(buf.split().freeze());
            while let Some(r) = splitter.next_line() {
                match r {
                    Ok(line) => send_line(t, &line, &reply_tx).await?,
                    Err(e) => {
                        // The editor's stream cannot be resynchronised.
                        return Err(e);
                    }
                }
            }
        }
        stopping.store(true, std::sync::atomic::Ordering::Release);
        t.stop(stop_timeout).await
    };

    let output_pump = async {
        loop {
            let msg = tokio::select! {
                biased;
                Some(reply) = reply_rx.recv() => reply.into_bytes().into(),
                m = t.recv() => match m {
                    Some(Ok(m)) => m,
                    Some(Err(e)) => {
                        tracing::error!(error = %e, "the agent's output failed");
                        break;
                    }
                    None => break,
                },
            };
            let line = framing::with_newline(&msg);
            framing::write_and_flush(&mut output, &line, "writing the bridge's output").await?;
        }
        Ok::<(), AcpError>(())
    };

    let mut input_pump = pin!(input_pump);
    let mut output_pump = pin!(output_pump);
    let mut input_done = false;
    loop {
        tokio::select! {
            () = &mut shutdown => {
                return kill_and_wait(t).await;
            }
            r = &mut input_pump, if !input_done => {
                input_done = true;
                if let Err(e) = r {
                    tracing::error!(error = %e, "bridge input failed; stopping the agent");
                    let _ = t.kill().await;
                }
            }
            r = &mut output_pump => {
                if let Err(e) = r {
                    let _ = t.kill().await;
                    return Err(e);
                }
                break;
            }
        }
    }
    // The output ends when the agent's output does, and also as soon as a stop begins (reads
    // halt): a stop under way (EOF, grace, kill) must be driven to its end, or an agent that
    // ignores the EOF is never killed and the wait below never returns.
    if !input_done && stopping.load(std::sync::atomic::Ordering::Acquire) {
        tokio::select! {
            () = &mut shutdown => return kill_and_wait(t).await,
            r = &mut input_pump => {
                if let Err(e) = r {
                    tracing::warn!(error = %e, "stopping the agent failed; killing it");
                    let _ = t.kill().await;
                }
            }
        }
    }
    tokio::select! {
        () = &mut shutdown => kill_and_wait(t).await,
        r = transport.wait() => r,
    }
}

/// Kill the agent at once (a shutdown signal) and wait for its end.
async fn kill_and_wait(t: &AcpTransport) -> Result<AgentExit, AcpError> {
    tracing::debug!("shutdown requested; killing the agent");
    if let Err(e) = t.kill().await {
        tracing::warn!(error = %e, "could not kill the agent");
    }
    t.wait().await
}

async fn send_line(
    t: &AcpTransport,
    line: &[u8],
    replies: &tokio::sync::mpsc::UnboundedSender<String>,
) -> Result<(), AcpError> {
    match t.send(line).await {
        Ok(()) => Ok(()),
        Err(e @ (AcpError::MessageTooLarge { .. } | AcpError::InvalidMessage { .. })) => {
            tracing::error!(error = %e, "refused a message from the editor");
            if let Some(reply) = crate::agent::local_error_response_bytes(line, &e) {
                let _ = replies.send(reply);
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}
