//! The seam between the MCP tools and the sandbox they run in.
//!
//! The server logic (timeouts, output caps, progress, file chunking, error literals) is written
//! against [`SandboxBackend`]; the sandbox implementation sits behind it.

use std::collections::HashMap;

use bytes::Bytes;
use futures::stream::BoxStream;

use crate::error::{BackendError, FileError};

/// What to run.
#[derive(Debug, Clone)]
pub(crate) struct RunSpec {
    /// A shell command line.
    pub(crate) cmd: String,
    /// The shell that runs it (`<shell> -c <cmd>`).
    pub(crate) shell: String,
    /// Run the shell as a login shell (`-l`).
    pub(crate) login_shell: bool,
    /// Working directory; the sandbox default when `None`.
    pub(crate) cwd: Option<String>,
    /// Extra environment variables.
    pub(crate) env: HashMap<String, String>,
    /// Bytes written to the program's stdin, which is then closed. `None`: no stdin.
    pub(crate) stdin: Option<Bytes>,
    /// A lifetime after which the sandbox itself kills the process group (a safety net; the
    /// server enforces the real timeout). `None`: none.
    pub(crate) hard_timeout: Option<std::time::Duration>,
    /// Keep stdin open after `stdin` was written (a background process fed by `write_stdin`).
    pub(crate) keep_stdin: bool,
}

impl RunSpec {
    /// `cmd` run by `/bin/sh -c`, nothing else set.
    pub(crate) fn sh(cmd: impl Into<String>) -> Self {
        Self {
            cmd: cmd.into(),
            shell: "/bin/sh".into(),
            login_shell: false,
            cwd: None,
            env: HashMap::new(),
            stdin: None,
            hard_timeout: None,
            keep_stdin: false,
        }
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExitInfo {
    /// The exit code the sandbox reported (for a signal death, may be anything).
    pub(crate) exit_code: i32,
    /// The signal that killed it, if any.
    pub(crate) signal: Option<i32>,
}

impl ExitInfo {
    /// The shell convention: the code, or 128 + N for a death by signal N.
    pub(crate) fn code(&self) -> i32 {
        match self.signal {
            Some(n) => 128 + n,
            None => self.exit_code,
        }
    }
}

/// One event of a running process, in arrival order.
#[derive(Debug, Clone)]
pub(crate) enum ProcEvent {
    Stdout(Bytes),
    Stderr(Bytes),
    /// Always the last event.
    Exit(ExitInfo),
}

/// Kills a running process and its whole process group.
#[async_trait::async_trait]
pub(crate) trait Killer: Send + Sync {
    /// SIGKILL to the process group.
    async fn kill(&self) -> Result<(), BackendError>;

    /// SIGTERM (a polite stop); the default kills.
    async fn terminate(&self) -> Result<(), BackendError> {
        self.kill().await
    }

    /// Writes to the process's stdin (it must have been started with `keep_stdin`).
    async fn write_stdin(&self, _data: Bytes) -> Result<(), BackendError> {
        Err(BackendError::new(
            "this sandbox cannot write to a running process's stdin",
        ))
    }

    /// Closes the process's stdin (EOF).
    async fn close_stdin(&self) -> Result<(), BackendError> {
        Err(BackendError::new(
            "this sandbox cannot close a running process's stdin",
        ))
    }

    /// The process id in the sandbox, when known.
    fn pid(&self) -> Option<u32> {
        None
    }
}

/// A started process.
pub(crate) struct Spawned {
    pub(crate) events: BoxStream<'static, Result<ProcEvent, BackendError>>,
    pub(crate) killer: Box<dyn Killer>,
}

/// Metadata of a path.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FileStat {
    pub(crate) is_dir: bool,
    /// A regular file (or a symlink to one): the only kind whose content the tools move.
    pub(crate) is_file: bool,
    pub(crate) size: u64,
}

/// A slice of a file.
#[derive(Debug, Clone)]
pub(crate) struct FileChunk {
    pub(crate) data: Bytes,
    /// The file's total size.
    pub(crate) size: u64,
}

/// The operations the tools need from a sandbox.
#[async_trait::async_trait]
pub(crate) trait SandboxBackend: Send + Sync + 'static {
    /// The sandbox's own id.
    fn sandbox_id(&self) -> String;

    /// Facts about the sandbox for `inspect` (envd version, features); `null` when unknown.
    fn describe(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// How the sandbox is isolated: `{"isolation": "on"|"off"|"unknown", "detail": "..."}`.
    async fn isolation(&self) -> serde_json::Value {
        serde_json::json!({
            "isolation": "unknown",
            "detail": "this backend cannot tell how its sandbox is isolated",
        })
    }

    /// Starts `spec` in its own process group, with output streamed as events.
    async fn spawn(&self, spec: RunSpec) -> Result<Spawned, BackendError>;

    /// Metadata of an absolute path.
    async fn stat(&self, path: &str) -> Result<FileStat, FileError>;

    /// Reads at most `len` bytes at `offset`.
    async fn read_chunk(&self, path: &str, offset: u64, len: u64) -> Result<FileChunk, FileError>;

    /// Replaces the file with `data` atomically (parents created; an existing file keeps its
    /// mode); returns the file's size afterwards.
    async fn write_file(&self, path: &str, data: Bytes) -> Result<u64, FileError>;

    /// Replaces `destination` atomically with the concatenation of `sources` (which are then
    /// removed, except `destination` itself when it is one of them); returns the new size.
    async fn compose(&self, sources: &[String], destination: &str) -> Result<u64, FileError>;

    /// Removes a file (a missing one is fine).
    async fn remove(&self, path: &str) -> Result<(), FileError>;
}
