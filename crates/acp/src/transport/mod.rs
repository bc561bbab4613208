//! The newline-delimited JSON-RPC transport over an [`AgentProcess`].
//!
//! Tasks: one reader (stdout → splitter → filter → bounded read queue), one writer (the single
//! ordered queue to stdin: client messages, transport replies, EOF), one stderr drainer (bounded
//! tail, optional callback) and one exit watcher. Their shared lifecycle is one
//! `state::Phase` in one `watch` channel, moved only by `Shared::transition`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::error::{AcpError, Direction};
use crate::filter;
use crate::framing::{self, LineSplitter};
use crate::options::{AcpOptions, MAX_QUEUED_REPLIES, MAX_QUEUED_REPLY_BYTES};
use crate::process::{AgentProcess, ByteStream, ProcessExit};

/// How an agent ended, as reported by [`AcpTransport::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AgentExit {
    /// Exit code, when it exited normally.
    pub code: Option<i32>,
    /// Signal number, when a signal ended it.
    pub signal: Option<i32>,
    /// True when this crate killed it (`kill`, `stop` after its timeout, drop).
    pub killed: bool,
}

impl AgentExit {
    /// True for exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0) && self.signal.is_none()
    }
}

mod reader;
mod state;
mod stderr;
mod writer;

use reader::read_loop;
use state::{Event, Lifecycle};
use stderr::{Tail, stderr_loop};
use writer::{WriteCmd, write_loop};

pub(crate) struct Shared {
    process: Arc<dyn AgentProcess>,
    pid: u32,
    max: usize,
    write_tx: mpsc::UnboundedSender<WriteCmd>,
    write_permits: Arc<Semaphore>,
    /// Byte budget of the read queue (`AcpOptions::read_queue_bytes`): a queued message holds
    /// permits for its size (capped at the budget) until it is received.
    read_bytes: Arc<Semaphore>,
    read_bytes_max: u32,
    queued_replies: AtomicUsize,
    queued_reply_bytes: AtomicUsize,
    /// The lifecycle (phase and failures); the tasks wait on it for halts and the exit.
    life: watch::Sender<Lifecycle>,
    stderr: Arc<StdMutex<Tail>>,
}

/// A message in the read queue with its share of the byte budget.
type Queued = (Bytes, OwnedSemaphorePermit);

struct RxState {
    rx: mpsc::Receiver<Queued>,
    error_reported: bool,
}

/// A running agent spoken to in newline-delimited JSON-RPC, with the sandbox rules applied:
/// `initialize` rewritten, `fs/*` and `terminal/*` from the agent answered with -32601, non-JSON
/// lines answered with -32700. Lines are raw bytes (one JSON message each, no line ending).
///
/// Dropping it kills the agent.
pub struct AcpTransport {
    shared: Arc<Shared>,
    rx: Mutex<RxState>,
}

impl std::fmt::Debug for AcpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcpTransport")
            .field("pid", &self.shared.pid)
            .finish_non_exhaustive()
    }
}

/// Completes once `pred` holds for the lifecycle `rx` follows (at once if it already does).
async fn until(rx: &mut watch::Receiver<Lifecycle>, pred: fn(&Lifecycle) -> bool) {
    // The sender lives in `Shared`, which every waiting task holds: no other way to end.
    let _ = rx.wait_for(pred).await;
}

fn lock<T>(m: &StdMutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl AcpTransport {
    /// Start the transport tasks on a started process. Must run inside a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`AcpError::InvalidOptions`] for out-of-range options, [`AcpError::Closed`] when the
    /// process's stdout was already taken (the process is then killed when dropped).
    pub fn start(mut process: impl AgentProcess, opts: &AcpOptions) -> Result<Self, AcpError> {
        opts.validate()?;
        let stdout = process
            .take_stdout()
            .ok_or_else(|| AcpError::closed("the process's stdout was already taken"))?;
        let stderr = process.take_stderr();
        let process: Arc<dyn AgentProcess> = Arc::new(process);
        Ok(Self::start_arc(process, stdout, stderr, opts))
    }

    fn start_arc(
        process: Arc<dyn AgentProcess>,
        stdout: ByteStream,
        stderr: Option<ByteStream>,
        opts: &AcpOptions,
    ) -> Self {
        let (write_tx, write_rx) = mpsc::unbounded_channel();
        let (read_tx, read_rx) = mpsc::channel(opts.read_queue_depth);
        let shared = Arc::new(Shared {
            pid: process.pid(),
            process,
            max: opts.max_message_bytes,
            write_tx,
            write_permits: Arc::new(Semaphore::new(opts.write_queue_depth)),
            read_bytes: Arc::new(Semaphore::new(opts.read_queue_bytes)),
            // validated by opts.validate(): 1..=u32::MAX
            read_bytes_max: u32::try_from(opts.read_queue_bytes).unwrap_or(u32::MAX),
            queued_replies: AtomicUsize::new(0),
            queued_reply_bytes: AtomicUsize::new(0),
            life: watch::Sender::new(Lifecycle::new()),
            stderr: Arc::new(StdMutex::new(Tail {
                buf: VecDeque::new(),
                cap: opts.stderr_tail_bytes,
            })),
        });
        // The splitter limit was validated by opts.validate().
        let splitter = LineSplitter::new(opts.max_message_bytes.max(1));
        if let Ok(splitter) = splitter {
            tokio::spawn(read_loop(shared.clone(), stdout, read_tx, splitter));
        }
        tokio::spawn(write_loop(shared.clone(), write_rx));
        if let Some(stderr) = stderr {
            tokio::spawn(stderr_loop(
                stderr,
                shared.stderr.clone(),
                opts.on_stderr.clone(),
            ));
        }
        let watcher = shared.clone();
        tokio::spawn(async move {
            let r = watcher.process.wait().await.map_err(|e| e.to_string());
            // A dead agent reads nothing more: pending and later writes fail promptly.
            watcher.transition(Event::Exit(r));
        });
        Self {
            shared,
            rx: Mutex::new(RxState {
                rx: read_rx,
                error_reported: false,
            }),
        }
    }

    /// The agent's process id.
    pub fn pid(&self) -> u32 {
        self.shared.pid
    }

    /// The configured per-message limit.
    pub fn max_message_bytes(&self) -> usize {
        self.shared.max
    }

    /// Send one message (a JSON object, with or without a trailing newline). `initialize` is
    /// rewritten. Waits while the write queue is full.
    ///
    /// # Errors
    ///
    /// [`AcpError::MessageTooLarge`] (nothing sent) above the limit,
    /// [`AcpError::InvalidMessage`] for an embedded newline, [`AcpError::Closed`] after
    /// stop/kill/exit.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the message is either queued whole or not at all.
    pub async fn send(&self, message: impl AsRef<[u8]>) -> Result<(), AcpError> {
        self.shared.send(message.as_ref()).await
    }

    /// Send a JSON value (serialized on one line).
    ///
    /// # Errors
    ///
    /// As [`send`](Self::send).
    ///
    /// # Cancel safety
    ///
    /// As [`send`](Self::send).
    pub async fn send_json(&self, value: &serde_json::Value) -> Result<(), AcpError> {
        let bytes = serde_json::to_vec(value).map_err(|e| AcpError::InvalidMessage {
            reason: e.to_string(),
        })?;
        self.send(bytes).await
    }

    /// The next message from the agent (without the line ending). After the stream ends, a
    /// terminal error (for example [`AcpError::MessageTooLarge`]) is returned once, then `None`.
    ///
    /// # Errors
    ///
    /// `Some(Err(..))`, once, with the error that ended reading from the agent:
    /// [`AcpError::MessageTooLarge`] (the agent was killed), or [`AcpError::Process`] /
    /// [`AcpError::Sandbox`] when its output stream failed.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future never loses a message.
    pub async fn recv(&self) -> Option<Result<Bytes, AcpError>> {
        let mut st = self.rx.lock().await;
        if let Some((line, _budget)) = st.rx.recv().await {
            return Some(Ok(line));
        }
        if !st.error_reported {
            st.error_reported = true;
            if let Some(e) = self.shared.error() {
                return Some(Err(e));
            }
        }
        None
    }

    /// The next message parsed as JSON.
    ///
    /// # Errors
    ///
    /// As [`recv`](Self::recv), and [`AcpError::InvalidMessage`] for a line that is not JSON
    /// (the filter lets none through).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe, as [`recv`](Self::recv).
    pub async fn recv_json(&self) -> Option<Result<serde_json::Value, AcpError>> {
        Some(self.recv().await?.and_then(|b| {
            serde_json::from_slice(&b).map_err(|e| AcpError::InvalidMessage {
                reason: format!("the agent sent invalid JSON: {e}"),
            })
        }))
    }

    /// The last bytes the agent wrote to stderr (lossy UTF-8).
    pub fn stderr_tail(&self) -> String {
        self.shared.stderr_tail()
    }

    /// Bytes of transport replies (-32601, -32700) waiting for the agent's stdin; never more than
    /// [`MAX_QUEUED_REPLY_BYTES`](crate::options::MAX_QUEUED_REPLY_BYTES).
    #[doc(hidden)]
    pub fn queued_reply_bytes(&self) -> usize {
        self.shared.queued_reply_bytes()
    }

    /// The error that ended reading from the agent, if any (oversized message, failed stream).
    pub fn transport_error(&self) -> Option<AcpError> {
        self.shared.error()
    }

    /// Wait for the agent to end. Several callers may wait.
    ///
    /// `Ok` for exit code 0 or an agent this crate killed.
    ///
    /// # Errors
    ///
    /// [`AcpError::AgentFailed`] (with the stderr tail) for any other exit;
    /// [`AcpError::MessageTooLarge`] when the agent was stopped because it sent an oversized
    /// message; [`AcpError::Process`] when the agent's output stream failed before its exit was
    /// known (the sandbox connection broke: the agent may still run until stop, kill or drop).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only observes; call it again.
    pub async fn wait(&self) -> Result<AgentExit, AcpError> {
        self.shared.wait().await
    }

    /// Stop the agent: no new messages are accepted, messages already queued for the client stay
    /// readable and later ones are dropped; queued writes are flushed, stdin is closed (EOF), and
    /// if the agent has not exited when `timeout` is nearly over (or EOF is unsupported, or its
    /// output stream failed) its process group is killed. The whole call is bounded by `timeout`.
    ///
    /// Idempotent and safe after exit.
    ///
    /// # Errors
    ///
    /// [`AcpError::StopTimeout`] if the exit was not observed in time;
    /// [`AcpError::Unsupported`] when the sandbox's envd cannot close stdin (older than 0.5.2):
    /// the agent was killed instead; [`AcpError::Sandbox`] when the kill could not be sent.
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a dropped stop leaves the transport closing (nothing more is sent or
    /// received) but the agent maybe running; call [`kill`](Self::kill) or drop the transport,
    /// which kills it.
    pub async fn stop(&self, timeout: Duration) -> Result<(), AcpError> {
        self.shared.stop(timeout).await
    }

    /// Kill the agent's process group now. Output waiting for room in the read queue is released
    /// first (so the exit is seen and [`wait`](Self::wait) returns); queued writes are dropped.
    /// Idempotent and safe after exit.
    ///
    /// Returns `true` when it killed the agent, `false` when the agent had already exited.
    ///
    /// # Errors
    ///
    /// [`AcpError::Sandbox`] when the sandbox could not be asked to kill the process.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe in effect: the transport is closed and the kill sent before the first await
    /// point that can block; dropping the future may only lose the answer.
    pub async fn kill(&self) -> Result<bool, AcpError> {
        self.shared.kill().await
    }
}

impl AcpTransport {
    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }
}

impl Drop for AcpTransport {
    fn drop(&mut self) {
        self.shared.kill_on_drop();
    }
}

impl Shared {
    /// Apply `event` to the phase (the table in [`state`]); a refused move changes nothing and
    /// returns false.
    fn transition(&self, event: Event) -> bool {
        let mut applied = true;
        self.life
            .send_if_modified(|life| match life.phase.next(event) {
                Ok(next) => {
                    let changed = next != life.phase;
                    life.phase = next;
                    changed
                }
                Err(refused) => {
                    tracing::debug!(?refused, "refused lifecycle move");
                    applied = false;
                    false
                }
            });
        applied
    }

    /// Record a failure (waking no one: no task waits for a failure alone).
    fn record(&self, f: impl FnOnce(&mut Lifecycle)) {
        self.life.send_if_modified(|life| {
            f(life);
            false
        });
    }

    /// Read the lifecycle.
    fn with_life<T>(&self, f: impl FnOnce(&Lifecycle) -> T) -> T {
        f(&self.life.borrow())
    }

    /// Completes once `pred` holds (at once if it already does).
    async fn until(&self, pred: fn(&Lifecycle) -> bool) {
        until(&mut self.life.subscribe(), pred).await;
    }

    /// A receiver of the lifecycle for a task that waits on it repeatedly.
    fn follow(&self) -> watch::Receiver<Lifecycle> {
        self.life.subscribe()
    }

    /// True once the agent's exit was observed. A failed output stream is not an exit: the
    /// agent may still run, so stop and drop kill it.
    pub(crate) fn exit_known(&self) -> bool {
        self.with_life(|l| l.phase.exit_known())
    }

    /// True once `stop`, `kill` or drop was called: the SDK layer dispatches nothing after it.
    pub(crate) fn is_user_closed(&self) -> bool {
        self.with_life(|l| l.phase.user_closed())
    }

    pub(crate) fn error(&self) -> Option<AcpError> {
        self.with_life(|l| l.read_error.as_ref().map(AcpError::duplicate))
    }

    /// Keep the first error that ended reading.
    fn set_error(&self, e: AcpError) {
        self.record(|l| {
            if l.read_error.is_none() {
                l.read_error = Some(e);
            }
        });
    }

    pub(crate) fn stderr_tail(&self) -> String {
        let t = lock(&self.stderr);
        let (a, b) = t.buf.as_slices();
        let mut v = Vec::with_capacity(a.len() + b.len());
        v.extend_from_slice(a);
        v.extend_from_slice(b);
        String::from_utf8_lossy(&v).into_owned()
    }

    /// Validate, rewrite and size-check an outgoing message; returns the bytes to write.
    pub(crate) fn prepare(&self, message: &[u8]) -> Result<Bytes, AcpError> {
        let mut msg = message;
        if msg.last() == Some(&b'\n') {
            msg = &msg[..msg.len() - 1];
            if msg.last() == Some(&b'\r') {
                msg = &msg[..msg.len() - 1];
            }
        }
        if memchr::memchr(b'\n', msg).is_some() {
            return Err(AcpError::InvalidMessage {
                reason: "the message contains a newline".to_owned(),
            });
        }
        if crate::framing::is_blank(msg) {
            return Err(AcpError::InvalidMessage {
                reason: "the message is empty".to_owned(),
            });
        }
        let rewritten = filter::rewrite_client_message(msg);
        if rewritten.len() > self.max {
            return Err(AcpError::MessageTooLarge {
                direction: Direction::ToAgent,
                limit: self.max,
                size: Some(rewritten.len()),
            });
        }
        Ok(framing::with_newline(&rewritten))
    }

    fn closed_error(&self) -> AcpError {
        self.with_life(|l| {
            if let Some(e) = l.write_error.as_ref() {
                AcpError::closed(format!("writing to the agent failed: {e}"))
            } else if l.phase.exit_known() {
                AcpError::closed("the agent exited")
            } else {
                AcpError::closed("the agent was stopped or killed")
            }
        })
    }

    pub(crate) async fn send(&self, message: &[u8]) -> Result<(), AcpError> {
        if !self.with_life(|l| l.phase.accepts_sends()) {
            return Err(self.closed_error());
        }
        let line = self.prepare(message)?;
        let permit = match self.write_permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => tokio::select! {
                biased;
                () = self.until(Lifecycle::writes_halted) => return Err(self.closed_error()),
                p = self.write_permits.clone().acquire_owned() => p.map_err(|_| self.closed_error())?,
            },
        };
        self.write_tx
            .send(WriteCmd::Line(line, Some(permit)))
            .map_err(|_| self.closed_error())
    }

    /// Queue a transport reply; never waits (capped by MAX_QUEUED_REPLIES replies and
    /// MAX_QUEUED_REPLY_BYTES bytes).
    fn reply(&self, reply: Bytes) {
        let size = reply.len() + 1;
        if self.queued_replies.fetch_add(1, Ordering::AcqRel) >= MAX_QUEUED_REPLIES {
            self.queued_replies.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!("the agent is not reading its stdin; dropped a transport reply");
            return;
        }
        let before = self.queued_reply_bytes.fetch_add(size, Ordering::AcqRel);
        if before + size > MAX_QUEUED_REPLY_BYTES {
            self.queued_reply_bytes.fetch_sub(size, Ordering::AcqRel);
            self.queued_replies.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(
                size,
                "the agent is not reading its stdin; dropped a transport reply (byte bound)"
            );
            return;
        }
        if self
            .write_tx
            .send(WriteCmd::Line(framing::with_newline(&reply), None))
            .is_err()
        {
            self.queued_reply_bytes.fetch_sub(size, Ordering::AcqRel);
            self.queued_replies.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Bytes of transport replies waiting for the agent's stdin.
    pub(crate) fn queued_reply_bytes(&self) -> usize {
        self.queued_reply_bytes.load(Ordering::Acquire)
    }

    pub(crate) async fn wait_exit(&self) -> Result<ProcessExit, AcpError> {
        let mut rx = self.life.subscribe();
        let life = rx
            .wait_for(Lifecycle::wait_ended)
            .await
            .map_err(|_| AcpError::closed("the exit watcher ended"))?;
        match life.phase.exit() {
            Some(Ok(exit)) => Ok(*exit),
            Some(Err(e)) => Err(AcpError::Process {
                action: "waiting for the agent",
                reason: e.clone(),
            }),
            None => Err(AcpError::closed("the exit watcher ended")),
        }
    }

    pub(crate) async fn wait(&self) -> Result<AgentExit, AcpError> {
        let exit = self.wait_exit().await?;
        if let Some(e) = self.error()
            && e.is_message_too_large()
        {
            return Err(e);
        }
        let killed = self.with_life(|l| l.phase.killed());
        if exit.success() || killed {
            return Ok(AgentExit {
                code: exit.code,
                signal: exit.signal,
                killed,
            });
        }
        Err(AcpError::AgentFailed {
            code: exit.code,
            signal: exit.signal,
            stderr_tail: self.stderr_tail(),
        })
    }

    pub(crate) async fn stop(&self, timeout: Duration) -> Result<(), AcpError> {
        let start = Instant::now();
        let deadline = start + timeout;
        let reserve = (timeout / 4).min(Duration::from_secs(1));
        let grace_end = deadline - reserve;
        self.transition(Event::Stop);
        if self.exit_known() {
            return Ok(());
        }
        let mut unsupported = None;
        if !self.with_life(|l| l.output_failed || l.wait_ended()) {
            let graceful = async {
                let (ack_tx, ack_rx) = oneshot::channel();
                if self.write_tx.send(WriteCmd::Eof(ack_tx)).is_ok()
                    && let Ok(Err(e)) = ack_rx.await
                {
                    if matches!(e, AcpError::Unsupported { .. }) {
                        return Err(e);
                    }
                    // Closing stdin fails when the agent has just exited on its own (its exit
                    // event may still be on its way): that exit, not a kill, decides. The grace
                    // period bounds the wait when the failure had another cause.
                    tracing::debug!(error = %e, "closing the agent's stdin failed; waiting for its exit");
                }
                self.wait_exit().await.map(|_| ())
            };
            match tokio::time::timeout_at(grace_end, graceful).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e @ AcpError::Unsupported { .. })) => {
                    tracing::debug!(error = %e, "cannot close the agent's stdin; killing it");
                    unsupported = Some(e);
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "graceful stop failed; killing the agent")
                }
                Err(_) => tracing::debug!("the agent did not exit after EOF; killing it"),
            }
        }
        self.transition(Event::UserKill);
        if let Ok(Err(e)) = tokio::time::timeout_at(deadline, self.process.kill()).await {
            return Err(e);
        }
        if tokio::time::timeout_at(deadline, self.wait_exit())
            .await
            .is_err()
        {
            return Err(AcpError::StopTimeout { timeout });
        }
        // The agent is gone, but not the way the caller asked: say why it had to be killed.
        unsupported.map_or(Ok(()), Err)
    }

    pub(crate) async fn kill(&self) -> Result<bool, AcpError> {
        let running = !self.exit_known();
        self.transition(Event::UserKill);
        Ok(self.process.kill().await? && running)
    }

    pub(crate) fn kill_on_drop(&self) {
        self.transition(Event::UserKill);
        if !self.exit_known() {
            self.process.clone().kill_now();
        }
    }

    /// Kill because of a fatal transport error (oversize); does not wait.
    fn kill_for_error(self: &Arc<Self>) {
        self.transition(Event::OversizeKill);
        let me = self.clone();
        tokio::spawn(async move {
            if let Err(e) = me.process.kill().await {
                tracing::warn!(error = %e, "could not kill the agent after an oversized message");
            }
        });
    }
}
