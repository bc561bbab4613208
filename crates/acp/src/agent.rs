//! The official `agent-client-protocol` (5.x, protocol v1) client connection on top of the
//! transport.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{
    Agent, Client, HandleConnectionClose, HandleDispatchFrom, Lines, RunWithConnectionTo,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::error::AcpError;
use crate::options::AcpOptions;
use crate::process::AgentProcess;
use crate::transport::{AcpTransport, AgentExit};

/// A client builder from the official crate: `agent_client_protocol::Client.v1()` with your
/// handlers registered.
pub type ClientBuilder<H, R, C> = agent_client_protocol::v1::Builder<Client, H, R, C>;

/// A running ACP agent with the official client connection to it.
///
/// Dropping it kills the agent.
pub struct AcpAgent {
    connection: ConnectionTo<Agent>,
    transport: Arc<AcpTransport>,
    driver: JoinHandle<Result<(), agent_client_protocol::Error>>,
    end_main: tokio_util::sync::CancellationToken,
}

impl std::fmt::Debug for AcpAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcpAgent")
            .field("pid", &self.transport.pid())
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct RequestIds<'a> {
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
    #[serde(default)]
    method: Option<serde::de::IgnoredAny>,
}

/// For a request refused locally (too large), the error response the client should see.
pub(crate) fn local_error_response_bytes(line: &[u8], err: &AcpError) -> Option<String> {
    local_error_response(std::str::from_utf8(line).ok()?, err)
}

/// For a request refused locally (too large), the error response the SDK should see.
fn local_error_response(line: &str, err: &AcpError) -> Option<String> {
    let ids: RequestIds<'_> = serde_json::from_str(line).ok()?;
    let id = ids.id?;
    ids.method?;
    let message = serde_json::to_string(&err.to_string()).ok()?;
    Some(format!(
        r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":-32603,"message":{message}}}}}"#,
        id.get()
    ))
}

impl AcpAgent {
    /// Connect `client` to an agent running as `process` (any [`AgentProcess`]: a sandbox
    /// command or a local child).
    ///
    /// # Errors
    ///
    /// [`AcpError::InvalidOptions`] for out-of-range options, [`AcpError::Closed`] when the
    /// process's stdout was already taken, [`AcpError::Protocol`] when the ACP connection ended
    /// before it started. The agent is killed on every error.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it returns kills the agent (the process passed in is owned
    /// from the first poll).
    pub async fn connect<P, H, R, C>(
        process: P,
        client: ClientBuilder<H, R, C>,
        opts: AcpOptions,
    ) -> Result<AcpAgent, AcpError>
    where
        P: AgentProcess,
        H: HandleDispatchFrom<Agent> + 'static,
        R: RunWithConnectionTo<Agent> + 'static,
        C: HandleConnectionClose<Agent> + 'static,
    {
        let transport = Arc::new(AcpTransport::start(process, &opts)?);
        // Until the connection is handed out, dropping this future kills the agent: the driver
        // task holds the transport and would otherwise keep it running.
        let mut guard = StartGuard {
            transport: Some(transport.clone()),
            driver: None,
        };
        let (inject_tx, inject_rx) = mpsc::unbounded_channel::<String>();

        let incoming = futures::stream::unfold(
            (transport.clone(), inject_rx),
            |(t, mut inject)| async move {
                if t.shared().is_user_closed() {
                    return None;
                }
                let item = tokio::select! {
                    biased;
                    Some(s) = inject.recv() => Ok(s),
                    m = t.recv() => match m {
                        None => return None,
                        Some(Ok(b)) => String::from_utf8(b.to_vec())
                            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
                        Some(Err(e)) => Err(io::Error::other(e)),
                    },
                };
                if t.shared().is_user_closed() {
                    return None;
                }
                Some((item, (t, inject)))
            },
        );
        let outgoing = futures::sink::unfold(
            (transport.clone(), inject_tx),
            |(t, inject), line: String| async move {
                match t.send(line.as_bytes()).await {
                    Ok(()) => Ok((t, inject)),
                    Err(e) if e.is_message_too_large() => {
                        tracing::error!(error = %e, "refused an outgoing ACP message");
                        if let Some(resp) = local_error_response(&line, &e) {
                            let _ = inject.send(resp);
                        }
                        Ok((t, inject))
                    }
                    Err(e) => Err(io::Error::other(e)),
                }
            },
        );
        let lines = Lines::new(outgoing, incoming);

        let (cx_tx, cx_rx) = oneshot::channel();
        let end_main = tokio_util::sync::CancellationToken::new();
        let end_rx = end_main.clone();
        let driver_task = tokio::spawn(async move {
            client
                .connect_with(lines, async move |cx: ConnectionTo<Agent>| {
                    let _ = cx_tx.send(cx.clone());
                    tokio::select! {
                        _ = end_rx.cancelled() => {}
                        _ = cx.incoming_closed() => {}
                    }
                    Ok(())
                })
                .await
        });
        guard.driver = Some(driver_task.abort_handle());
        let connection = match cx_rx.await {
            Ok(cx) => cx,
            Err(_) => {
                transport.shared().kill_on_drop();
                return Err(match driver_task.await {
                    Ok(Err(e)) => AcpError::Protocol(e),
                    _ => AcpError::closed("the ACP connection ended before it started"),
                });
            }
        };
        guard.disarm();
        let driver = driver_task;
        Ok(AcpAgent {
            connection,
            transport,
            driver,
            end_main,
        })
    }

    /// The ACP connection: send requests (`initialize`, `session/new`, `session/prompt`, …) with
    /// `connection().send_request(..).block_task().await`.
    pub fn connection(&self) -> &ConnectionTo<Agent> {
        &self.connection
    }

    /// The agent's process id.
    pub fn pid(&self) -> u32 {
        self.transport.pid()
    }

    /// The last bytes the agent wrote to stderr.
    pub fn stderr_tail(&self) -> String {
        self.transport.stderr_tail()
    }

    /// The error that ended the transport, if any (for example [`AcpError::MessageTooLarge`]
    /// when the agent sent an oversized message: the connection's pending requests then fail with
    /// a "transport error" termination and this says why).
    pub fn transport_error(&self) -> Option<AcpError> {
        self.transport.transport_error()
    }

    /// Wait for the agent to end; see [`AcpTransport::wait`].
    ///
    /// # Errors
    ///
    /// As [`AcpTransport::wait`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only observes; call it again.
    pub async fn wait(&self) -> Result<AgentExit, AcpError> {
        self.transport.wait().await
    }

    /// Stop the agent (EOF, then kill when `timeout` is nearly over); see [`AcpTransport::stop`].
    /// Nothing more is dispatched to the client's handlers once it is called.
    ///
    /// # Errors
    ///
    /// As [`AcpTransport::stop`].
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a dropped stop leaves the agent closing (no new messages) but maybe
    /// running; call [`kill`](Self::kill) or drop the agent, which kills it.
    pub async fn stop(&self, timeout: Duration) -> Result<(), AcpError> {
        let r = self.transport.stop(timeout).await;
        self.end_main.cancel();
        r
    }

    /// Kill the agent's process group now; see [`AcpTransport::kill`]. Nothing more is dispatched
    /// to the client's handlers. Returns `true` when it killed the agent, `false` when the agent
    /// had already exited.
    ///
    /// # Errors
    ///
    /// [`AcpError::Sandbox`] when the sandbox could not be asked to kill the process.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe in effect: the kill is requested before the first await that can block.
    pub async fn kill(&self) -> Result<bool, AcpError> {
        let r = self.transport.kill().await;
        self.end_main.cancel();
        r
    }
}

/// Kills the agent and stops the driver when `connect` is dropped before it returned.
struct StartGuard {
    transport: Option<Arc<AcpTransport>>,
    driver: Option<tokio::task::AbortHandle>,
}

impl StartGuard {
    fn disarm(&mut self) {
        self.transport = None;
        self.driver = None;
    }
}

impl Drop for StartGuard {
    fn drop(&mut self) {
        if let Some(t) = self.transport.take() {
            t.shared().kill_on_drop();
        }
        if let Some(d) = self.driver.take() {
            d.abort();
        }
    }
}

impl Drop for AcpAgent {
    fn drop(&mut self) {
        self.transport.shared().kill_on_drop();
        self.driver.abort();
    }
}
