//! [`StdinWriter`]: a command's stdin over one open client-streaming `StreamInput` RPC, so a
//! write is one message (one HTTP/2 DATA frame) on a stream that stays open instead of a whole
//! unary `SendInput` request and response.

use std::sync::Arc;

use bytes::Bytes;
use e2b_envd_client::{CallOptions, Transport};
use e2b_envd_proto::process::stream_input_request::{DataEvent, Event, StartEvent};
use e2b_envd_proto::process::{ProcessInput, StreamInputRequest, process_input};
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::CommandError;
use crate::options::ProcessSelector;
use crate::rpc::{ProcessRpc, SUPPORTED, UNSUPPORTED};

/// Largest message put on the stream; a bigger write is split (in order). Stays far below
/// envd's message size limit (4 MiB by default in gRPC servers).
pub(crate) const STREAM_CHUNK: usize = 256 * 1024;
/// Messages queued between the writer and the HTTP/2 stream before `write` waits (with
/// [`STREAM_CHUNK`], at most 4 MiB in flight besides HTTP/2's own window).
const STREAM_QUEUE: usize = 16;

/// Writes to a command's stdin (or its terminal, for a PTY command) over envd's
/// client-streaming `StreamInput` RPC, kept open between writes.
///
/// Get one with [`CommandHandle::stdin_writer`](crate::CommandHandle::stdin_writer) or
/// [`Commands::stdin_writer`](crate::Commands::stdin_writer). Cheap to clone; clones share the stream, and writes (from any
/// clone) reach the process in the order the `write` calls complete.
///
/// - [`write`](Self::write) returns once the data is queued on the stream, without waiting
///   for envd to answer. A failure on the stream (the process is gone, its stdin was closed)
///   is therefore reported by a *later* `write`, or by [`flush`](Self::flush) /
///   [`close`](Self::close). The data of a write that fails may or may not have arrived.
/// - [`flush`](Self::flush) ends the stream and waits for envd's answer, which comes after
///   every queued write reached the process's stdin; the next write opens a new stream.
/// - [`close`](Self::close) flushes, then closes stdin (EOF; Ctrl-D for a PTY command), so
///   the process sees every byte written before the EOF.
/// - Dropping every clone ends the stream gracefully: queued data is still delivered.
///
/// Falls back to one unary `SendInput` per write (the same as
/// [`Commands::send_stdin`](crate::Commands::send_stdin)) where a stream cannot be used: on the gRPC-Web transport
/// (HTTP/1.1, where a long-lived request body is not reliable through proxies) and when envd
/// answers `StreamInput` with `Unimplemented`. Support is probed once per [`Commands`](crate::Commands), on the
/// first write, with a stream that carries only the start message; nothing is lost by the
/// fallback. [`is_streaming`](Self::is_streaming) tells which path is used.
///
/// Writes through this writer are not ordered against `send_stdin` calls made elsewhere.
#[derive(Clone)]
pub struct StdinWriter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for StdinWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdinWriter")
            .field("pid", &self.inner.pid)
            .field("pty", &self.inner.pty)
            .finish_non_exhaustive()
    }
}

struct Inner {
    rpc: ProcessRpc,
    pid: u32,
    pty: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The open stream, if any (opened by the first write after creation or a flush).
    open: Option<OpenStream>,
    /// Set once the unary path is chosen for this writer.
    unary: bool,
}

struct OpenStream {
    tx: mpsc::Sender<StreamInputRequest>,
    /// Cancelled when the RPC has ended (its result is in `task`).
    ended: CancellationToken,
    task: JoinHandle<Result<(), tonic::Status>>,
}

impl StdinWriter {
    pub(crate) fn new(rpc: ProcessRpc, pid: u32, pty: bool) -> Self {
        Self {
            inner: Arc::new(Inner {
                rpc,
                pid,
                pty,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// The process id the writer writes to.
    pub fn pid(&self) -> u32 {
        self.inner.pid
    }

    /// Whether writes go over the `StreamInput` stream (`false`: one `SendInput` per write).
    /// Before the first write this is the expectation (support is probed on the first write).
    pub fn is_streaming(&self) -> bool {
        let rpc = &self.inner.rpc;
        rpc.connection().transport() == Transport::Grpc
            && rpc.stream_support().get() != UNSUPPORTED
            && self
                .inner
                .state
                .try_lock()
                .map(|s| !s.unary)
                .unwrap_or(true)
    }

    /// Writes `data` (queued on the stream; see the type's docs for when errors show).
    /// An empty write does nothing.
    ///
    /// # Errors
    ///
    /// envd's answer as a [`CommandError`](crate::CommandError) variant: `NotFound` for an unknown
    /// pid, `SandboxUnavailable` when the sandbox is gone, `Transport` when it cannot be reached,
    /// `Authentication` for a refused token; `InvalidArgument` when stdin is closed. An error of an
    /// earlier write on the open stream surfaces here.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropping the future may leave part of the data written or queued; do not
    /// retry the same bytes blindly.
    pub async fn write(&self, data: impl Into<Bytes>) -> Result<(), CommandError> {
        let data: Bytes = data.into();
        if data.is_empty() {
            return Ok(());
        }
        let mut state = self.inner.state.lock().await;
        if !state.unary && !self.use_stream().await? {
            state.unary = true;
        }
        if state.unary {
            return self.send_unary(data).await;
        }
        let mut rest = data;
        while !rest.is_empty() {
            let chunk = rest.split_to(rest.len().min(STREAM_CHUNK));
            self.send_on_stream(&mut state, chunk).await?;
        }
        Ok(())
    }

    /// Ends the stream and waits until envd has written everything queued so far to the
    /// process (or reports why it could not). Nothing to do on the unary path.
    ///
    /// # Errors
    ///
    /// The first error the open input stream reported, as a `CommandError`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is changed by an unfinished call.
    pub async fn flush(&self) -> Result<(), CommandError> {
        let mut state = self.inner.state.lock().await;
        self.finish(&mut state).await
    }

    /// Flushes, then closes stdin (EOF). For a PTY command, sends Ctrl-D (0x04) instead, as
    /// [`CommandHandle::close_stdin`](crate::CommandHandle::close_stdin) does. Closing stdin
    /// needs envd 0.5.2 or newer.
    ///
    /// # Errors
    ///
    /// envd's answer as a [`CommandError`](crate::CommandError) variant: `NotFound` for an unknown
    /// pid, `SandboxUnavailable` when the sandbox is gone, `Transport` when it cannot be reached,
    /// `Authentication` for a refused token; the first error the open input stream reported.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the request was sent, envd may or may not have applied it;
    /// check before retrying.
    pub async fn close(&self) -> Result<(), CommandError> {
        let mut state = self.inner.state.lock().await;
        self.finish(&mut state).await?;
        let rpc = &self.inner.rpc;
        if self.inner.pty {
            rpc.send_input(self.inner.pid, Bytes::from_static(&[4]), true)
                .await
        } else {
            rpc.close_stdin(self.inner.pid).await
        }
    }

    async fn send_unary(&self, data: Bytes) -> Result<(), CommandError> {
        let rpc = &self.inner.rpc;
        rpc.send_input(self.inner.pid, data, self.inner.pty).await
    }

    /// Whether to use the stream: h2c, and envd serves `StreamInput` (probed once).
    async fn use_stream(&self) -> Result<bool, CommandError> {
        let rpc = &self.inner.rpc;
        if rpc.connection().transport() != Transport::Grpc {
            return Ok(false);
        }
        let support = rpc.stream_support();
        match support.get() {
            SUPPORTED => return Ok(true),
            UNSUPPORTED => return Ok(false),
            _ => {}
        }
        // An empty stream (start only): envd answers OK (it has StreamInput and the process is
        // live), NotFound (no such process; the write fails as SendInput would), or
        // Unimplemented (no StreamInput: fall back).
        let start = self.start_message();
        let req = rpc
            .connection()
            .request(futures::stream::iter([start]), &stream_call())?;
        let mut client = rpc.connection().process();
        match rpc.unary(client.stream_input(req)).await {
            Ok(_) => {
                support.set(SUPPORTED);
                Ok(true)
            }
            Err(e) if is_unimplemented(&e) => {
                tracing::debug!("envd has no StreamInput; writing stdin with SendInput");
                support.set(UNSUPPORTED);
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    fn start_message(&self) -> StreamInputRequest {
        StreamInputRequest {
            event: Some(Event::Start(StartEvent {
                process: Some(ProcessSelector::Pid(self.inner.pid).to_proto()),
            })),
        }
    }

    fn data_message(&self, data: Bytes) -> StreamInputRequest {
        let input = if self.inner.pty {
            process_input::Input::Pty(data)
        } else {
            process_input::Input::Stdin(data)
        };
        StreamInputRequest {
            event: Some(Event::Data(DataEvent {
                input: Some(ProcessInput { input: Some(input) }),
            })),
        }
    }

    fn open(&self) -> Result<OpenStream, CommandError> {
        let (tx, rx) = mpsc::channel::<StreamInputRequest>(STREAM_QUEUE);
        // The start message goes first; the channel is empty, so this cannot fail.
        tx.try_send(self.start_message())
            .map_err(|_| CommandError::protocol("the stdin stream's queue refused its start"))?;
        let body = tokio_stream::wrappers::ReceiverStream::new(rx);
        let conn = self.inner.rpc.connection();
        let req = conn.request(body, &stream_call())?;
        let mut client = conn.process();
        let ended = CancellationToken::new();
        let done = ended.clone();
        let task = tokio::spawn(async move {
            let r = client.stream_input(req).await.map(|_| ());
            done.cancel();
            r
        });
        Ok(OpenStream { tx, ended, task })
    }

    async fn send_on_stream(&self, state: &mut State, data: Bytes) -> Result<(), CommandError> {
        if state.open.as_ref().is_some_and(|o| o.ended.is_cancelled()) {
            // The stream ended on its own (an error): report it; the next write reopens.
            self.finish(state).await?;
        }
        let open = match &mut state.open {
            Some(open) => open,
            None => state.open.insert(self.open()?),
        };
        let sent = match open.tx.try_send(self.data_message(data)) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
            Err(mpsc::error::TrySendError::Full(msg)) => {
                tokio::select! {
                    biased;
                    r = open.tx.send(msg) => r.is_ok(),
                    _ = open.ended.cancelled() => false,
                }
            }
        };
        if sent {
            return Ok(());
        }
        // The RPC ended while we were queueing: its error says why.
        self.finish(state).await?;
        Err(CommandError::protocol(
            "envd ended the stdin stream before the data was sent",
        ))
    }

    /// Ends the open stream (if any) and returns its outcome.
    async fn finish(&self, state: &mut State) -> Result<(), CommandError> {
        let Some(OpenStream { tx, ended: _, task }) = state.open.take() else {
            return Ok(());
        };
        drop(tx);
        let res = match task.await {
            Ok(r) => r.map_err(CommandError::from),
            Err(e) => Err(CommandError::protocol(format!(
                "the stdin stream's task failed: {e}"
            ))),
        };
        match res {
            Err(e) => Err(self.inner.rpc.classify(e).await),
            Ok(()) => Ok(()),
        }
    }
}

fn stream_call() -> CallOptions {
    CallOptions::default().without_user()
}

fn is_unimplemented(e: &CommandError) -> bool {
    matches!(
        e,
        CommandError::Rpc {
            code: tonic::Code::Unimplemented,
            ..
        }
    )
}
