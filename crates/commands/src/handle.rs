//! The handle of a running command: its state shared with the output pump ([`pump`](crate::pump)),
//! waiting, signals, stdin, the retained output and the event stream.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use crate::decode::decode_buffer;
use crate::error::CommandError;
use crate::options::OutputCallback;
use crate::output::{CommandEvent, CommandOutput, ExitStatus};
use crate::pump;
use crate::rpc::ProcessRpc;
use crate::state::{EventItem, Guard, ProcessEvents, Retained, Shared, lock};
use crate::stdin::StdinWriter;

/// How many events the event stream buffers before the reader waits for it (back-pressure).
/// Events are envd's chunks: 32 KiB from E2B's envd, up to 1 MiB from ours.
pub const EVENT_BUFFER: usize = 8;

/// Callbacks and settings for the reader task.
pub(crate) struct Attach {
    pub(crate) pid: u32,
    pub(crate) is_pty: bool,
    pub(crate) retain: bool,
    pub(crate) on_stdout: Option<OutputCallback>,
    pub(crate) on_stderr: Option<OutputCallback>,
    pub(crate) events_from_start: bool,
    /// Stop following at this instant (client side; the process is not killed).
    pub(crate) follow_until: Option<(Instant, Duration)>,
}

/// A command running in the sandbox.
///
/// Cheap to clone; clones share the same command. Output is read by a background task from the
/// moment the handle exists: into the retained buffers (unless `retain_output(false)`), the
/// callbacks, and the event stream.
#[derive(Clone)]
pub struct CommandHandle {
    shared: Arc<Shared>,
    _guard: Arc<Guard>,
}

impl std::fmt::Debug for CommandHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandHandle")
            .field("pid", &self.shared.pid)
            .field("pty", &self.shared.is_pty)
            .field("retain_output", &self.shared.retain)
            .field("finished", &self.is_finished())
            .finish_non_exhaustive()
    }
}

impl CommandHandle {
    pub(crate) fn spawn(rpc: ProcessRpc, attach: Attach, events: ProcessEvents) -> Self {
        let (done, _) = watch::channel(None);
        let (tx, rx) = if attach.events_from_start {
            let (tx, rx) = mpsc::channel(EVENT_BUFFER);
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let shared = Arc::new(Shared {
            pid: attach.pid,
            rpc,
            is_pty: attach.is_pty,
            retain: attach.retain,
            has_callbacks: attach.on_stdout.is_some() || attach.on_stderr.is_some(),
            retained: Mutex::new(Retained::default()),
            done,
            disconnected: AtomicBool::new(false),
            cancel: CancellationToken::new(),
            events_tx: Mutex::new(tx),
            events_rx: Mutex::new(rx),
            stdin_writer: OnceLock::new(),
        });
        let guard = Arc::new(Guard {
            shared: shared.clone(),
        });
        pump::spawn(
            shared.clone(),
            Arc::downgrade(&guard),
            attach.on_stdout,
            attach.on_stderr,
            events,
            attach.follow_until,
        );
        Self {
            shared,
            _guard: guard,
        }
    }

    /// The process id in the sandbox.
    pub fn pid(&self) -> u32 {
        self.shared.pid
    }

    /// Whether the command runs in a pseudo-terminal.
    pub fn is_pty(&self) -> bool {
        self.shared.is_pty
    }

    /// Whether the handle keeps output.
    pub fn retains_output(&self) -> bool {
        self.shared.retain
    }

    /// Whether the outcome is known (the command ended, or following it failed or was
    /// disconnected).
    pub fn is_finished(&self) -> bool {
        self.shared.done.borrow().is_some()
    }

    /// The exit status, once the command ended (non-blocking).
    pub fn exit_status(&self) -> Option<ExitStatus> {
        match &*self.shared.done.borrow() {
            Some(Ok(st)) => Some(st.clone()),
            _ => None,
        }
    }

    /// Waits for the command to end and returns its output (as retained) and exit status. A
    /// non-zero exit is data; use [`CommandOutput::check`] to make it an error. Any number of
    /// callers may wait, concurrently or later.
    ///
    /// Fails when the command timeout expired ([`CommandError::DeadlineExceeded`]), the handle
    /// was disconnected before the end ([`CommandError::Disconnected`]), a callback failed
    /// ([`CommandError::Callback`]) or the connection was lost.
    ///
    /// If the event stream is fed (see [`CommandOptions::events`](crate::CommandOptions::events))
    /// someone must read it, or the command (and this call) waits for that reader.
    ///
    /// # Errors
    ///
    /// `Disconnected` after [`CommandHandle::disconnect`], `Callback` when an output callback
    /// failed, `SandboxUnavailable` or `Transport` when the output stream broke before the end
    /// event, `NoExitStatus` when it ended without one.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: waiting again (or on a clone) gives the same result; the process is not
    /// affected.
    pub async fn wait(&self) -> Result<CommandOutput, CommandError> {
        let mut rx = self.shared.done.subscribe();
        let outcome = match rx.wait_for(Option::is_some).await {
            Ok(v) => v.clone(),
            Err(_) => None,
        };
        match outcome {
            Some(Ok(status)) => {
                let (out, err) = self.retained_bytes();
                Ok(CommandOutput::new(status, out, err))
            }
            Some(Err(e)) => Err(e),
            None => Err(CommandError::NoExitStatus {
                pid: self.shared.pid,
            }),
        }
    }

    /// Kills the command (SIGKILL to its process group). `false` if it no longer exists.
    ///
    /// # Errors
    ///
    /// envd's answer as a [`CommandError`](crate::CommandError) variant: `NotFound` for an unknown
    /// pid, `SandboxUnavailable` when the sandbox is gone, `Transport` when it cannot be reached,
    /// `Authentication` for a refused token.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the request was sent, envd may or may not have applied it;
    /// check before retrying.
    pub async fn kill(&self) -> Result<bool, CommandError> {
        self.shared
            .rpc
            .signal(self.shared.pid, crate::Signal::Kill)
            .await
    }

    /// Sends a signal to the command.
    ///
    /// # Errors
    ///
    /// envd's answer as a [`CommandError`](crate::CommandError) variant: `NotFound` for an unknown
    /// pid, `SandboxUnavailable` when the sandbox is gone, `Transport` when it cannot be reached,
    /// `Authentication` for a refused token.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the request was sent, envd may or may not have applied it;
    /// check before retrying.
    pub async fn signal(&self, signal: crate::Signal) -> Result<bool, CommandError> {
        self.shared.rpc.signal(self.shared.pid, signal).await
    }

    /// Writes to the command's stdin (to the terminal for a PTY command). The command must have
    /// been started with stdin open.
    ///
    /// # Errors
    ///
    /// envd's answer as a [`CommandError`](crate::CommandError) variant: `NotFound` for an unknown
    /// pid, `SandboxUnavailable` when the sandbox is gone, `Transport` when it cannot be reached,
    /// `Authentication` for a refused token; `InvalidArgument` when stdin is closed or was never
    /// opened.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the request was sent, envd may or may not have applied it;
    /// check before retrying. The data may have been written.
    pub async fn send_stdin(&self, data: impl Into<Bytes>) -> Result<(), CommandError> {
        if self.shared.is_pty {
            self.shared
                .rpc
                .send_input(self.shared.pid, data.into(), true)
                .await
        } else {
            self.shared
                .rpc
                .send_input(self.shared.pid, data.into(), false)
                .await
        }
    }

    /// The command's stdin writer (its terminal for a PTY command): one `StreamInput` stream
    /// kept open for the handle, so each write is one message on it rather than a `SendInput`
    /// request. Every call returns a clone of the same writer. See [`StdinWriter`].
    pub fn stdin_writer(&self) -> StdinWriter {
        self.shared
            .stdin_writer
            .get_or_init(|| {
                StdinWriter::new(self.shared.rpc.clone(), self.shared.pid, self.shared.is_pty)
            })
            .clone()
    }

    /// Closes the command's stdin (EOF). For a PTY command, sends Ctrl-D (0x04) instead, as E2B
    /// does. Needs envd 0.5.2 or newer (nothing is sent on older). When the handle's
    /// [`stdin_writer`](Self::stdin_writer) was used, what it queued is delivered first.
    ///
    /// # Errors
    ///
    /// envd's answer as a [`CommandError`](crate::CommandError) variant: `NotFound` for an unknown
    /// pid, `SandboxUnavailable` when the sandbox is gone, `Transport` when it cannot be reached,
    /// `Authentication` for a refused token; `UnsupportedFeature` before envd 0.5.2 (nothing is
    /// sent).
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the request was sent, envd may or may not have applied it;
    /// check before retrying.
    pub async fn close_stdin(&self) -> Result<(), CommandError> {
        if let Some(writer) = self.shared.stdin_writer.get() {
            return writer.close().await;
        }
        if self.shared.is_pty {
            self.shared
                .rpc
                .send_input(self.shared.pid, Bytes::from_static(&[4]), true)
                .await
        } else {
            self.shared.rpc.close_stdin(self.shared.pid).await
        }
    }

    /// Resizes the command's terminal (PTY commands only).
    ///
    /// # Errors
    ///
    /// envd's answer as a [`CommandError`](crate::CommandError) variant: `NotFound` for an unknown
    /// pid, `SandboxUnavailable` when the sandbox is gone, `Transport` when it cannot be reached,
    /// `Authentication` for a refused token; `InvalidArgument` when the command has no PTY.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the request was sent, envd may or may not have applied it;
    /// check before retrying.
    pub async fn resize(&self, size: crate::PtySize) -> Result<(), CommandError> {
        self.shared.rpc.resize_pty(self.shared.pid, size).await
    }

    /// Stops following the command: the process keeps running in the sandbox (reattach with
    /// [`Commands::connect`](crate::Commands::connect)). Once this returns no callback starts; a callback already running
    /// may finish (calling `disconnect` from inside a callback is fine). If the command had
    /// already ended, [`wait`](Self::wait) still returns its exit status; otherwise `wait` fails
    /// with [`CommandError::Disconnected`].
    ///
    /// # Errors
    ///
    /// None: it returns nothing.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the disconnect takes effect when the call starts; a dropped future leaves the
    /// handle disconnected.
    pub async fn disconnect(&self) {
        self.shared.disconnected.store(true, Ordering::SeqCst);
        self.shared.cancel.cancel();
    }

    /// The retained stdout (or PTY output) as text so far: complete characters only until the
    /// command ends. Empty when output is not retained.
    pub fn stdout(&self) -> String {
        let finished = self.is_finished();
        let r = lock(&self.shared.retained);
        match &r.frozen {
            Some((out, _)) => decode_buffer(out, true),
            None => decode_buffer(&r.stdout, finished),
        }
    }

    /// The retained stderr as text so far. Empty when output is not retained.
    pub fn stderr(&self) -> String {
        let finished = self.is_finished();
        let r = lock(&self.shared.retained);
        match &r.frozen {
            Some((_, err)) => decode_buffer(err, true),
            None => decode_buffer(&r.stderr, finished),
        }
    }

    /// The exact retained stdout bytes so far.
    pub fn stdout_bytes(&self) -> Bytes {
        self.retained_bytes().0
    }

    /// The exact retained stderr bytes so far.
    pub fn stderr_bytes(&self) -> Bytes {
        self.retained_bytes().1
    }

    /// How many output bytes the handle holds (0 with `retain_output(false)`).
    pub fn retained_len(&self) -> usize {
        let r = lock(&self.shared.retained);
        match &r.frozen {
            Some((o, e)) => o.len() + e.len(),
            None => r.stdout.len() + r.stderr.len(),
        }
    }

    fn retained_bytes(&self) -> (Bytes, Bytes) {
        let r = lock(&self.shared.retained);
        match &r.frozen {
            Some((o, e)) => (o.clone(), e.clone()),
            None => (
                Bytes::copy_from_slice(&r.stdout),
                Bytes::copy_from_slice(&r.stderr),
            ),
        }
    }

    /// The event stream: every output chunk in arrival order, then [`CommandEvent::Exit`] (or
    /// one error item). It can be taken once; `None` afterwards.
    ///
    /// When the stream is fed from the start (the default for `start_streaming` with no
    /// callbacks, or [`CommandOptions::events(true)`](crate::CommandOptions::events)) it sees
    /// every event. Otherwise it sees the events from the moment it is taken.
    ///
    /// The stream is bounded ([`EVENT_BUFFER`] events): while it is not read, the output is not
    /// read either, which slows envd's fan-out and then the process. Nothing is dropped.
    /// Dropping the stream stops feeding it.
    pub fn take_events(&mut self) -> Option<CommandEvents> {
        self.take_events_shared()
    }

    /// [`take_events`](Self::take_events) through a shared reference.
    pub fn take_events_shared(&self) -> Option<CommandEvents> {
        let mut rx = lock(&self.shared.events_rx);
        if let Some(rx) = rx.take() {
            return Some(CommandEvents {
                rx: ReceiverStream::new(rx),
            });
        }
        let mut tx = lock(&self.shared.events_tx);
        if tx.is_some() || self.is_finished() {
            // Already taken (or nothing more will come).
            return None;
        }
        let (new_tx, new_rx) = mpsc::channel(EVENT_BUFFER);
        *tx = Some(new_tx);
        Some(CommandEvents {
            rx: ReceiverStream::new(new_rx),
        })
    }
}

/// The events of a command: `Stream<Item = Result<CommandEvent, CommandError>>`.
///
/// Ends after [`CommandEvent::Exit`] or after an error item.
#[derive(Debug)]
pub struct CommandEvents {
    rx: ReceiverStream<EventItem>,
}

impl CommandEvents {
    /// The next event, or `None` at the end.
    ///
    /// # Errors
    ///
    /// An item is `Err` when following the command failed (the connection broke, a callback
    /// failed, the follow timeout expired); the stream ends after it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an event is only taken from the channel when the future completes.
    pub async fn recv(&mut self) -> Option<Result<CommandEvent, CommandError>> {
        self.rx.as_mut().recv().await
    }
}

impl Stream for CommandEvents {
    type Item = Result<CommandEvent, CommandError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.rx).poll_next(cx)
    }
}
