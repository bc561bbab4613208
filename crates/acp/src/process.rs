//! The agent process abstraction the transport runs on.
//!
//! The transport does not care where the agent runs: [`AgentProcess`] is implemented for a local
//! child process ([`crate::local::LocalProcess`]) and for a command in a sandbox (the `sandbox`
//! module, on top of `e2b_commands::CommandHandle`).

use std::pin::Pin;

use bytes::Bytes;
use futures::Stream;
use futures::future::BoxFuture;

use crate::error::AcpError;

/// A stream of output chunks (arbitrary boundaries). It ends when the process closes the stream.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, AcpError>> + Send>>;

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProcessExit {
    /// Exit code, when the process exited normally.
    pub code: Option<i32>,
    /// Signal number, when a signal ended it.
    pub signal: Option<i32>,
}

impl ProcessExit {
    /// An exit with a code.
    pub fn code(code: i32) -> Self {
        Self {
            code: Some(code),
            signal: None,
        }
    }

    /// An exit by a signal.
    pub fn signal(signal: i32) -> Self {
        Self {
            code: None,
            signal: Some(signal),
        }
    }

    /// True for exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0) && self.signal.is_none()
    }
}

/// An agent process: a stdin to write to, stdout and stderr byte streams, and its lifecycle.
///
/// Implementations must make [`kill`](Self::kill) reach the whole process group, be idempotent and
/// succeed after the process exited. [`wait`](Self::wait) is called once by the transport.
/// The process is shared between the transport's tasks, hence `Sync`: keep the not-yet-taken
/// streams behind a `std::sync::Mutex` or as channel receivers.
pub trait AgentProcess: Send + Sync + 'static {
    /// The process id (in the sandbox for a sandboxed agent).
    fn pid(&self) -> u32;
    /// The stdout chunks; `None` once taken.
    fn take_stdout(&mut self) -> Option<ByteStream>;
    /// The stderr chunks; `None` once taken.
    fn take_stderr(&mut self) -> Option<ByteStream>;
    /// Write bytes to stdin (the transport only calls this from one task, in order).
    fn write_stdin(&self, data: Bytes) -> BoxFuture<'_, Result<(), AcpError>>;
    /// Close stdin (EOF). May fail with [`AcpError::Unsupported`] (envd older than 0.5.2).
    fn close_stdin(&self) -> BoxFuture<'_, Result<(), AcpError>>;
    /// Kill the process group with SIGKILL. Idempotent, fine after exit: `Ok(true)` when a
    /// signal was sent, `Ok(false)` when the process no longer existed.
    fn kill(&self) -> BoxFuture<'_, Result<bool, AcpError>>;
    /// Best-effort synchronous kill for `Drop`; the default spawns [`kill`](Self::kill) on the
    /// current tokio runtime if there is one.
    fn kill_now(self: std::sync::Arc<Self>) {
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = self.kill().await;
            });
        }
    }
    /// Wait for the process to end.
    fn wait(&self) -> BoxFuture<'_, Result<ProcessExit, AcpError>>;
}
