//! The handle of a running command and the task that reads its output.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use e2b_envd_proto::process::process_event::{Event, data_event::Output};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt as _};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::decode::{Utf8Decoder, decode_buffer};
use crate::error::CommandError;
use crate::options::{CallbackKind, OutputCallback};
use crate::output::{CommandEvent, CommandOutput, ExitStatus};
use crate::rpc::ProcessRpc;
use crate::stdin::StdinWriter;

/// How many events the event stream buffers before the reader waits for it (back-pressure).
/// Events are envd's chunks: 32 KiB from E2B's envd, up to 1 MiB from ours.
pub const EVENT_BUFFER: usize = 8;

/// The envd events of one Start/Connect stream, after the start event.
pub(crate) type ProcessEvents = BoxStream<'static, Result<Option<Event>, tonic::Status>>;

type EventItem = Result<CommandEvent, CommandError>;
type Outcome = Option<Result<ExitStatus, CommandError>>;

fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Default)]
struct Retained {
    stdout: BytesMut,
    stderr: BytesMut,
    /// Set once the command ended: the buffers, frozen, so every reader shares them.
    frozen: Option<(Bytes, Bytes)>,
}

pub(crate) struct Shared {
    pid: u32,
    rpc: ProcessRpc,
    is_pty: bool,
    retain: bool,
    has_callbacks: bool,
    retained: Mutex<Retained>,
    done: watch::Sender<Outcome>,
    disconnected: AtomicBool,
    cancel: CancellationToken,
    events_tx: Mutex<Option<mpsc::Sender<EventItem>>>,
    events_rx: Mutex<Option<mpsc::Receiver<EventItem>>>,
    /// The handle's stream writer, created by the first `stdin_writer()` call.
    stdin_writer: OnceLock<StdinWriter>,
}

/// Dropped with the last [`CommandHandle`] clone: an event stream nobody took is discarded, and
/// the reader stops when nothing else (callbacks, a taken stream) needs the output.
struct Guard {
    shared: Arc<Shared>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        drop(lock(&self.shared.events_rx).take());
        let stream_live = lock(&self.shared.events_tx)
            .as_ref()
            .is_some_and(|tx| !tx.is_closed());
        if !self.shared.has_callbacks && !stream_live {
            self.shared.cancel.cancel();
        }
    }
}

/// A callback panicked (its message).
#[derive(Debug)]
struct CallbackPanic(String);

impl std::fmt::Display for CallbackPanic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the callback panicked: {}", self.0)
    }
}

impl std::error::Error for CallbackPanic {}

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
        let reader = Reader {
            shared: shared.clone(),
            guard: Arc::downgrade(&guard),
            on_stdout: attach.on_stdout,
            on_stderr: attach.on_stderr,
            out_dec: Utf8Decoder::new(),
            err_dec: Utf8Decoder::new(),
        };
        let supervised = shared.clone();
        tokio::spawn(async move {
            let run = std::panic::AssertUnwindSafe(reader.run(events, attach.follow_until));
            if let Err(panic) = futures::FutureExt::catch_unwind(run).await {
                // A callback panicked: end the command's outcome with that, so `wait()` and the
                // event stream do not hang.
                let text = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a callback panicked".to_owned());
                let err = CommandError::Callback {
                    stream: "output",
                    source: Arc::new(CallbackPanic(text)),
                };
                if supervised.done.borrow().is_none() {
                    supervised.done.send_replace(Some(Err(err.clone())));
                }
                let tx = lock(&supervised.events_tx).take();
                if let Some(tx) = tx {
                    let _ = tx.try_send(Err(err));
                }
            }
        });
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
    /// [`Commands::connect`]). Once this returns no callback starts; a callback already running
    /// may finish (calling `disconnect` from inside a callback is fine). If the command had
    /// already ended, [`wait`](Self::wait) still returns its exit status; otherwise `wait` fails
    /// with [`CommandError::Disconnected`].
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
            return Some(CommandEvents { rx });
        }
        let mut tx = lock(&self.shared.events_tx);
        if tx.is_some() || self.is_finished() {
            // Already taken (or nothing more will come).
            return None;
        }
        let (new_tx, new_rx) = mpsc::channel(EVENT_BUFFER);
        *tx = Some(new_tx);
        Some(CommandEvents { rx: new_rx })
    }
}

/// The events of a command: `Stream<Item = Result<CommandEvent, CommandError>>`.
///
/// Ends after [`CommandEvent::Exit`] or after an error item.
#[derive(Debug)]
pub struct CommandEvents {
    rx: mpsc::Receiver<EventItem>,
}

impl CommandEvents {
    /// The next event, or `None` at the end.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an event is only taken from the channel when the future completes.
    pub async fn recv(&mut self) -> Option<Result<CommandEvent, CommandError>> {
        self.rx.recv().await
    }
}

impl Stream for CommandEvents {
    type Item = Result<CommandEvent, CommandError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Stdout,
    Stderr,
    Pty,
}

struct Reader {
    shared: Arc<Shared>,
    guard: Weak<Guard>,
    on_stdout: Option<OutputCallback>,
    on_stderr: Option<OutputCallback>,
    out_dec: Utf8Decoder,
    err_dec: Utf8Decoder,
}

enum Flow {
    Go,
    Stop(CommandError),
}

impl Reader {
    async fn run(mut self, mut events: ProcessEvents, follow_until: Option<(Instant, Duration)>) {
        let pid = self.shared.pid;
        let cancel = self.shared.cancel.clone();
        let until = async {
            match follow_until {
                Some((at, _)) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(until);
        let result: Result<ExitStatus, CommandError> = loop {
            let item = tokio::select! {
                biased;
                _ = cancel.cancelled() => break Err(CommandError::Disconnected { pid }),
                _ = &mut until => {
                    let after = follow_until.map(|(_, d)| d).unwrap_or_default();
                    break Err(CommandError::DeadlineExceeded {
                        message: format!(
                            "stopped following process {pid} after {after:?} (ConnectOptions::timeout); the process was not killed and keeps running"
                        ),
                    });
                }
                item = events.next() => item,
            };
            let event = match item {
                None => break Err(CommandError::NoExitStatus { pid }),
                Some(Err(status)) => break Err(CommandError::from(status)),
                Some(Ok(ev)) => ev,
            };
            match event {
                Some(Event::Data(d)) => {
                    let (kind, bytes) = match d.output {
                        Some(Output::Stdout(b)) => (Kind::Stdout, b),
                        Some(Output::Stderr(b)) => (Kind::Stderr, b),
                        Some(Output::Pty(b)) => (Kind::Pty, b),
                        None => continue,
                    };
                    if let Flow::Stop(e) = self.deliver(kind, bytes).await {
                        break Err(e);
                    }
                }
                Some(Event::End(end)) => break Ok(ExitStatus::from_end(end)),
                Some(Event::Start(_) | Event::Keepalive(_)) | None => {}
            }
        };
        drop(events);

        // Flush the decoders (end, error, or stream closed without an end), unless the user
        // disconnected or a callback failed.
        let stopped_by_us = matches!(
            result,
            Err(CommandError::Disconnected { .. } | CommandError::Callback { .. })
        ) || self.shared.disconnected.load(Ordering::SeqCst);
        let mut result = result;
        if !stopped_by_us && let Err(e) = self.flush().await {
            result = Err(e);
        }
        let lost = matches!(
            &result,
            Err(CommandError::NoExitStatus { .. } | CommandError::Transport { .. })
                | Err(CommandError::Rpc {
                    code: tonic::Code::Internal | tonic::Code::Unknown,
                    ..
                })
        );
        if lost && self.shared.rpc.sandbox_gone().await {
            result = Err(CommandError::SandboxUnavailable {
                message: format!(
                    "the sandbox was killed or reached its end of life while process {pid} was running"
                ),
            });
        }

        {
            let mut r = lock(&self.shared.retained);
            let out = r.stdout.split().freeze();
            let err = r.stderr.split().freeze();
            r.frozen = Some((out, err));
        }
        let final_item = match &result {
            Ok(st) => Ok(CommandEvent::Exit(st.clone())),
            Err(e) => Err(e.clone()),
        };
        self.shared.done.send_replace(Some(result));

        let tx = lock(&self.shared.events_tx).take();
        if let Some(tx) = tx {
            if cancel.is_cancelled() {
                let _ = tx.try_send(final_item);
            } else {
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => {}
                    _ = tx.send(final_item) => {}
                }
            }
        }
    }

    async fn flush(&mut self) -> Result<(), CommandError> {
        let out = self.out_dec.finish();
        if !out.is_empty()
            && let Some(cb) = self.on_stdout.clone()
            && let Flow::Stop(e) = self.call_text(&cb, "on_stdout", out).await
        {
            return Err(e);
        }
        let err = self.err_dec.finish();
        if !err.is_empty()
            && let Some(cb) = self.on_stderr.clone()
            && let Flow::Stop(e) = self.call_text(&cb, "on_stderr", err).await
        {
            return Err(e);
        }
        Ok(())
    }

    async fn deliver(&mut self, kind: Kind, bytes: Bytes) -> Flow {
        if self.shared.retain {
            let mut r = lock(&self.shared.retained);
            match kind {
                Kind::Stdout | Kind::Pty => r.stdout.extend_from_slice(&bytes),
                Kind::Stderr => r.stderr.extend_from_slice(&bytes),
            }
        }
        let (cb, name) = match kind {
            Kind::Stdout | Kind::Pty => (self.on_stdout.clone(), "on_stdout"),
            Kind::Stderr => (self.on_stderr.clone(), "on_stderr"),
        };
        if let Some(cb) = cb {
            let flow = if cb.wants_text() {
                let dec = match kind {
                    Kind::Stderr => &mut self.err_dec,
                    _ => &mut self.out_dec,
                };
                let text = dec.decode(&bytes);
                if text.is_empty() {
                    Flow::Go
                } else {
                    self.call_text(&cb, name, text).await
                }
            } else {
                self.call_bytes(&cb, name, bytes.clone()).await
            };
            if let Flow::Stop(e) = flow {
                return Flow::Stop(e);
            }
        }
        self.send_event(match kind {
            Kind::Stdout => CommandEvent::Stdout(bytes),
            Kind::Stderr => CommandEvent::Stderr(bytes),
            Kind::Pty => CommandEvent::Pty(bytes),
        })
        .await
    }

    fn disconnected(&self) -> Option<Flow> {
        self.shared.disconnected.load(Ordering::SeqCst).then(|| {
            Flow::Stop(CommandError::Disconnected {
                pid: self.shared.pid,
            })
        })
    }

    async fn call_text(&self, cb: &OutputCallback, name: &'static str, text: String) -> Flow {
        if let Some(stop) = self.disconnected() {
            return stop;
        }
        let res = match &cb.0 {
            CallbackKind::Text(f) => {
                let mut f = lock(f);
                f(&text)
            }
            CallbackKind::TextAsync(f) => {
                let fut = {
                    let mut f = lock(f);
                    f(text)
                };
                tokio::select! {
                    biased;
                    _ = self.shared.cancel.cancelled() => Ok(()),
                    r = fut => r,
                }
            }
            CallbackKind::Bytes(_) | CallbackKind::BytesAsync(_) => Ok(()),
        };
        match res {
            Ok(()) => Flow::Go,
            Err(e) => Flow::Stop(CommandError::callback(name, e)),
        }
    }

    async fn call_bytes(&self, cb: &OutputCallback, name: &'static str, bytes: Bytes) -> Flow {
        if let Some(stop) = self.disconnected() {
            return stop;
        }
        let res = match &cb.0 {
            CallbackKind::Bytes(f) => {
                let mut f = lock(f);
                f(&bytes)
            }
            CallbackKind::BytesAsync(f) => {
                let fut = {
                    let mut f = lock(f);
                    f(bytes)
                };
                tokio::select! {
                    biased;
                    _ = self.shared.cancel.cancelled() => Ok(()),
                    r = fut => r,
                }
            }
            CallbackKind::Text(_) | CallbackKind::TextAsync(_) => Ok(()),
        };
        match res {
            Ok(()) => Flow::Go,
            Err(e) => Flow::Stop(CommandError::callback(name, e)),
        }
    }

    async fn send_event(&self, event: CommandEvent) -> Flow {
        let tx = lock(&self.shared.events_tx).clone();
        let Some(tx) = tx else {
            return Flow::Go;
        };
        tokio::select! {
            biased;
            _ = self.shared.cancel.cancelled() => Flow::Stop(CommandError::Disconnected { pid: self.shared.pid }),
            r = tx.send(Ok(event)) => {
                if r.is_err() {
                    // The stream was dropped: stop feeding it. With no handle and no callbacks
                    // left, nobody needs the output any more.
                    lock(&self.shared.events_tx).take();
                    if self.guard.strong_count() == 0 && !self.shared.has_callbacks {
                        return Flow::Stop(CommandError::Disconnected { pid: self.shared.pid });
                    }
                }
                Flow::Go
            }
        }
    }
}
