//! Options for starting an ACP agent, with their defaults as named constants.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Default per-message limit: 32 MiB of line bytes (without the line ending), as the official
/// TypeScript SDK.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 32 * 1024 * 1024;

/// Default time `stop` gives the agent to exit after EOF before it is killed (the whole shutdown is
/// bounded by it).
pub const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// Default depth of the read queue: messages from the agent waiting for the client. When it is
/// full the transport stops reading the agent's stdout, so the agent's writes block (back-pressure)
/// instead of memory growing.
pub const DEFAULT_READ_QUEUE_DEPTH: usize = 64;

/// Default byte budget for agent messages read but not yet handled by the client: the read queue
/// holds at most this many bytes, and so does the official client's internal queue behind
/// [`AcpAgent`](crate::AcpAgent). When it is used up, reading the agent's stdout pauses
/// (back-pressure reaches the agent). A single message larger than the budget still passes alone.
pub const DEFAULT_READ_QUEUE_BYTES: usize = 8 * 1024 * 1024;

/// Default depth of the write queue for client messages: `send` waits once this many are queued.
/// Transport replies to the agent (-32601, -32700) do not wait on it (they are capped by
/// [`MAX_QUEUED_REPLIES`] instead) so that a slow agent can never deadlock the reader.
pub const DEFAULT_WRITE_QUEUE_DEPTH: usize = 64;

/// Transport replies (-32601, -32700) that may wait for the agent's stdin; more are dropped with a
/// warning (an agent that floods fs/terminal requests without reading its stdin).
pub const MAX_QUEUED_REPLIES: usize = 1024;

/// Bytes of transport replies (-32601, -32700) that may wait for the agent's stdin; a reply that
/// does not fit is dropped with a warning. Replies echo the request id, which the agent chooses:
/// without this bound an agent that sends large ids and never reads its stdin would grow memory
/// by up to [`MAX_QUEUED_REPLIES`] times the message limit.
pub const MAX_QUEUED_REPLY_BYTES: usize = 1024 * 1024;

/// Default size of the kept stderr tail, used in error reports.
pub const DEFAULT_STDERR_TAIL_BYTES: usize = 64 * 1024;

/// Error type a stderr callback may return; it is logged and the transport carries on.
pub type CallbackError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A synchronous stderr callback.
pub type SyncStderrCallback =
    Arc<dyn Fn(&[u8]) -> Result<(), CallbackError> + Send + Sync + 'static>;

/// An asynchronous stderr callback: returns the future to await for each chunk.
pub type AsyncStderrCallback = Arc<
    dyn Fn(bytes::Bytes) -> futures::future::BoxFuture<'static, Result<(), CallbackError>>
        + Send
        + Sync
        + 'static,
>;

/// Called with every chunk the agent writes to stderr, on the stderr-draining task, one chunk at
/// a time in order. An async callback is awaited before the next chunk is read: a slow one slows
/// the agent's stderr (back-pressure), never the protocol. An error or a panic is logged once and
/// does not affect the transport.
#[derive(Clone)]
#[non_exhaustive]
pub enum StderrCallback {
    /// Set with [`AcpOptions::on_stderr`].
    Sync(SyncStderrCallback),
    /// Set with [`AcpOptions::on_stderr_async`].
    Async(AsyncStderrCallback),
}

/// How to start and run an ACP agent. Build with [`AcpOptions::new`] (or `default()`) and the
/// setters; every field has a documented default.
#[derive(Clone)]
#[non_exhaustive]
pub struct AcpOptions {
    /// Per-message limit in bytes (line bytes without the line ending), both ways.
    /// Default [`DEFAULT_MAX_MESSAGE_BYTES`]. Must be at least 1.
    pub(crate) max_message_bytes: usize,
    /// Depth of the read queue. Default [`DEFAULT_READ_QUEUE_DEPTH`]. Must be at least 1.
    pub(crate) read_queue_depth: usize,
    /// Byte budget of the read queue, and of the official client's queue behind
    /// [`AcpAgent`](crate::AcpAgent). Default [`DEFAULT_READ_QUEUE_BYTES`]. Between 1 and
    /// `u32::MAX`.
    pub(crate) read_queue_bytes: usize,
    /// Depth of the write queue. Default [`DEFAULT_WRITE_QUEUE_DEPTH`]. Must be at least 1.
    pub(crate) write_queue_depth: usize,
    /// Timeout used when the agent is stopped without an explicit one (the bridge at EOF).
    /// Default [`DEFAULT_STOP_TIMEOUT`].
    pub(crate) stop_timeout: Duration,
    /// Bytes of stderr kept for error reports. Default [`DEFAULT_STDERR_TAIL_BYTES`].
    pub(crate) stderr_tail_bytes: usize,
    /// Optional stderr callback. Default none.
    pub(crate) on_stderr: Option<StderrCallback>,
    /// Working directory of the agent in the sandbox. Default: envd's default.
    pub(crate) cwd: Option<String>,
    /// Extra environment variables for the agent. Default none.
    pub(crate) envs: HashMap<String, String>,
    /// User to run the agent as in the sandbox. Default: envd's default user.
    pub(crate) user: Option<String>,
    /// Time allowed until the sandbox confirms the agent started. Default: the commands crate's.
    pub(crate) request_timeout: Option<Duration>,
}

impl Default for AcpOptions {
    fn default() -> Self {
        Self {
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            read_queue_depth: DEFAULT_READ_QUEUE_DEPTH,
            read_queue_bytes: DEFAULT_READ_QUEUE_BYTES,
            write_queue_depth: DEFAULT_WRITE_QUEUE_DEPTH,
            stop_timeout: DEFAULT_STOP_TIMEOUT,
            stderr_tail_bytes: DEFAULT_STDERR_TAIL_BYTES,
            on_stderr: None,
            cwd: None,
            envs: HashMap::new(),
            user: None,
            request_timeout: None,
        }
    }
}

impl std::fmt::Debug for AcpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcpOptions")
            .field("max_message_bytes", &self.max_message_bytes)
            .field("read_queue_depth", &self.read_queue_depth)
            .field("read_queue_bytes", &self.read_queue_bytes)
            .field("write_queue_depth", &self.write_queue_depth)
            .field("stop_timeout", &self.stop_timeout)
            .field("stderr_tail_bytes", &self.stderr_tail_bytes)
            .field("on_stderr", &self.on_stderr.as_ref().map(|_| "<callback>"))
            .field("cwd", &self.cwd)
            .field("envs", &self.envs.keys().collect::<Vec<_>>())
            .field("user", &self.user)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

impl AcpOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }
    /// Per-message limit in bytes (line bytes without the line ending), both ways.
    /// Default [`DEFAULT_MAX_MESSAGE_BYTES`]. Must be at least 1.
    pub fn max_message_bytes(mut self, n: usize) -> Self {
        self.max_message_bytes = n;
        self
    }
    /// Depth of the read queue. Default [`DEFAULT_READ_QUEUE_DEPTH`]. Must be at least 1.
    pub fn read_queue_depth(mut self, n: usize) -> Self {
        self.read_queue_depth = n;
        self
    }
    /// Byte budget of the read queue, and of the official client's queue behind
    /// [`AcpAgent`](crate::AcpAgent). Default [`DEFAULT_READ_QUEUE_BYTES`]. Between 1 and
    /// `u32::MAX`.
    pub fn read_queue_bytes(mut self, n: usize) -> Self {
        self.read_queue_bytes = n;
        self
    }
    /// Depth of the write queue. Default [`DEFAULT_WRITE_QUEUE_DEPTH`]. Must be at least 1.
    pub fn write_queue_depth(mut self, n: usize) -> Self {
        self.write_queue_depth = n;
        self
    }
    /// Timeout used when the agent is stopped without an explicit one (the bridge at EOF).
    /// Default [`DEFAULT_STOP_TIMEOUT`].
    pub fn stop_timeout(mut self, d: Duration) -> Self {
        self.stop_timeout = d;
        self
    }
    /// Bytes of stderr kept for error reports. Default [`DEFAULT_STDERR_TAIL_BYTES`].
    pub fn stderr_tail_bytes(mut self, n: usize) -> Self {
        self.stderr_tail_bytes = n;
        self
    }
    /// Set a synchronous stderr callback (see [`StderrCallback`]).
    pub fn on_stderr(
        mut self,
        f: impl Fn(&[u8]) -> Result<(), CallbackError> + Send + Sync + 'static,
    ) -> Self {
        self.on_stderr = Some(StderrCallback::Sync(Arc::new(f)));
        self
    }
    /// Set an asynchronous stderr callback (see [`StderrCallback`]): `f(chunk)` returns a future
    /// that is awaited before the next chunk is read.
    pub fn on_stderr_async<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(bytes::Bytes) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<(), CallbackError>> + Send + 'static,
    {
        self.on_stderr = Some(StderrCallback::Async(Arc::new(move |b| Box::pin(f(b)))));
        self
    }
    /// Working directory of the agent in the sandbox. Default: envd's default.
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }
    /// Adds an extra environment variable for the agent. Default none.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.envs.insert(key.into(), value.into());
        self
    }
    /// Adds extra environment variables for the agent.
    pub fn envs<K: Into<String>, V: Into<String>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.envs
            .extend(vars.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }
    /// User to run the agent as in the sandbox. Default: envd's default user.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }
    /// Time allowed until the sandbox confirms the agent started. Default: the commands crate's.
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = Some(d);
        self
    }

    pub(crate) fn validate(&self) -> Result<(), crate::AcpError> {
        crate::framing::validate_limit(self.max_message_bytes)?;
        for (name, v) in [
            ("read_queue_depth", self.read_queue_depth),
            ("write_queue_depth", self.write_queue_depth),
        ] {
            if v == 0 {
                return Err(crate::AcpError::InvalidOptions {
                    reason: format!("{name} must be at least 1"),
                });
            }
        }
        if self.read_queue_bytes == 0 || u32::try_from(self.read_queue_bytes).is_err() {
            return Err(crate::AcpError::InvalidOptions {
                reason: format!(
                    "read_queue_bytes must be between 1 and {} (got {})",
                    u32::MAX,
                    self.read_queue_bytes
                ),
            });
        }
        Ok(())
    }
}
