//! The official `agent-client-protocol` (5.x, protocol v1) client connection on top of the
//! transport.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{
    Agent, Client, Dispatch, HandleConnectionClose, HandleDispatchFrom, Handled, Lines,
    RunWithConnectionTo,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot, watch};
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

/// For a request refused locally (too large), the error response the SDK should see: -32603 with
/// the error's text as the message and `data.reason` naming the refusal
/// (`"message_too_large"` or `"invalid_message"`), so a caller can tell it from the agent's errors.
fn local_error_response(line: &str, err: &AcpError) -> Option<String> {
    let ids: RequestIds<'_> = serde_json::from_str(line).ok()?;
    let id = ids.id?;
    ids.method?;
    let data = match err {
        AcpError::MessageTooLarge { limit, size, .. } => {
            serde_json::json!({"reason": LOCAL_REFUSAL_TOO_LARGE, "limit": limit, "size": size})
        }
        _ => serde_json::json!({"reason": LOCAL_REFUSAL_INVALID}),
    };
    let message = serde_json::to_string(&err.to_string()).ok()?;
    Some(format!(
        r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":-32603,"message":{message},"data":{data}}}}}"#,
        id.get()
    ))
}

/// `data.reason` of the error a request gets when it was refused locally for its size (it was
/// never sent to the agent).
pub const LOCAL_REFUSAL_TOO_LARGE: &str = "message_too_large";

/// `data.reason` of the error a request gets when it was refused locally as not one JSON-RPC line.
pub const LOCAL_REFUSAL_INVALID: &str = "invalid_message";

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
        let flow = FlowControl::new(transport.clone());
        let incoming = futures::stream::unfold(
            Incoming {
                transport: transport.clone(),
                inject: inject_rx,
                consumed: flow.consumed_rx.clone(),
                marker: flow.marker.clone(),
                window: opts.read_queue_bytes as u64,
                yielded: 0,
                marked: 0,
            },
            |mut st| async move {
                let item = st.next().await?;
                Some((item, st))
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

        // The flow-control handler runs before the caller's handlers: it sees every marker the
        // dispatch loop reaches.
        let client = Client
            .v1()
            .with_handler(flow)
            .with_connection_builder(client);
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

/// Per-message cost added to its length in the flow-control window: a parsed message in the
/// official client's queue takes more than its bytes, and a flood of tiny messages must be bounded
/// too.
const MESSAGE_OVERHEAD: u64 = 256;

/// Bounds what the official client has read but not yet dispatched.
///
/// The official crate reads its incoming stream eagerly into an unbounded queue and dispatches
/// from it one message at a time, waiting for each handler. We own that stream, so we stop
/// yielding once `window` bytes are in flight, and learn what was dispatched from markers: a
/// notification with a per-connection random method, put into the stream after the messages it
/// accounts for. When the dispatch loop reaches a marker, every message before it has been
/// handled; [`FlowControl`] (the first handler in the chain) claims it and releases the credit.
/// While the window is full nothing is read from the transport, its read queue fills, its reader
/// stops reading the agent's output, and the agent blocks on its writes.
///
/// Being first, it is also the last guard after stop, kill or drop: from then on it claims every
/// dispatch (the official client may already have read messages ahead), so nothing reaches the
/// caller's handlers.
struct FlowControl {
    transport: Arc<AcpTransport>,
    marker: Arc<str>,
    consumed_tx: Arc<watch::Sender<u64>>,
    consumed_rx: watch::Receiver<u64>,
}

impl FlowControl {
    fn new(transport: Arc<AcpTransport>) -> Self {
        let (consumed_tx, consumed_rx) = watch::channel(0);
        Self {
            transport,
            marker: format!("_e2b_acp/flow/{}", random_token()).into(),
            consumed_tx: Arc::new(consumed_tx),
            consumed_rx,
        }
    }
}

/// 128 bits from the std hasher's random keys mixed with the time and a counter, in hex. The agent never sees the marker method, so it cannot forge one; this only has to
/// be unlikely to collide with a method the agent sends.
fn random_token() -> String {
    use std::fmt::Write as _;
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut out = String::with_capacity(32);
    for _ in 0..2 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            h.write_u128(d.as_nanos());
        }
        let _ = write!(out, "{:016x}", h.finish());
    }
    out
}

impl HandleDispatchFrom<Agent> for FlowControl {
    fn handle_dispatch_from(
        &mut self,
        message: Dispatch,
        _connection: agent_client_protocol::ConnectionTo<Agent>,
    ) -> impl std::future::Future<Output = Result<Handled<Dispatch>, agent_client_protocol::Error>> + Send
    {
        let handled = match &message {
            Dispatch::Notification(n) if n.method() == &*self.marker => {
                if let Some(upto) = n.params().get("upto").and_then(serde_json::Value::as_u64) {
                    self.consumed_tx.send_if_modified(|c| {
                        let advance = upto > *c;
                        if advance {
                            *c = upto;
                        }
                        advance
                    });
                }
                Handled::Yes
            }
            // Stopped or killed: swallow what was read ahead. A dropped request responder or
            // response router fails that request locally.
            _ if self.transport.shared().is_user_closed() => Handled::Yes,
            _ => Handled::No {
                message,
                retry: false,
            },
        };
        std::future::ready(Ok(handled))
    }

    fn describe_chain(&self) -> impl std::fmt::Debug {
        "e2b-acp flow control"
    }
}

/// The incoming side of the official client's `Lines` transport, with flow control.
struct Incoming {
    transport: Arc<AcpTransport>,
    /// Local error responses for requests refused before they were sent.
    inject: mpsc::UnboundedReceiver<String>,
    consumed: watch::Receiver<u64>,
    marker: Arc<str>,
    window: u64,
    /// Bytes (with [`MESSAGE_OVERHEAD`]) yielded so far.
    yielded: u64,
    /// `yielded` when the last marker was yielded.
    marked: u64,
}

impl Incoming {
    fn marker_line(&mut self) -> io::Result<String> {
        self.marked = self.yielded;
        Ok(format!(
            r#"{{"jsonrpc":"2.0","method":"{}","params":{{"upto":{}}}}}"#,
            self.marker, self.yielded
        ))
    }

    async fn next(&mut self) -> Option<io::Result<String>> {
        let t = self.transport.clone();
        loop {
            if t.shared().is_user_closed() {
                return None;
            }
            let in_flight = self.yielded - *self.consumed.borrow();
            if in_flight >= self.window {
                // Full: make sure a marker follows the last message, then wait for it (or a later
                // one) to be dispatched. Local error responses still pass.
                if self.marked < self.yielded {
                    return Some(self.marker_line());
                }
                let window = self.window;
                let yielded = self.yielded;
                let mut consumed = self.consumed.clone();
                tokio::select! {
                    biased;
                    Some(s) = self.inject.recv() => return Some(Ok(s)),
                    r = consumed.wait_for(|c| yielded - *c < window) => {
                        if r.is_err() {
                            return None;
                        }
                        continue;
                    }
                }
            }
            // A marker every quarter window keeps credit flowing while messages stream.
            if self.yielded - self.marked > self.window / 4 {
                return Some(self.marker_line());
            }
            let item = tokio::select! {
                biased;
                Some(s) = self.inject.recv() => Ok(s),
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
            if let Ok(s) = &item {
                self.yielded += s.len() as u64 + MESSAGE_OVERHEAD;
            }
            return Some(item);
        }
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
