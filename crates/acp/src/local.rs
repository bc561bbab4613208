//! A local child process as an [`AgentProcess`]: for tests, benchmarks and agents on the host.
//!
//! The child runs in its own process group; [`AgentProcess::kill`] sends SIGKILL to the group.

use std::process::Stdio;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::Mutex;

use crate::error::AcpError;
use crate::process::{AgentProcess, ByteStream, ProcessExit};

/// A local child process started with piped stdin, stdout and stderr in a new process group.
#[derive(Debug)]
pub struct LocalProcess {
    pid: u32,
    stdin: Mutex<Option<ChildStdin>>,
    child: Mutex<Child>,
    stdout: Option<tokio::process::ChildStdout>,
    stderr: Option<tokio::process::ChildStderr>,
}

impl LocalProcess {
    /// Start `program` with `args`.
    ///
    /// # Errors
    ///
    /// [`AcpError::Spawn`] when the process could not be started.
    pub fn spawn<I, S>(program: &str, args: I) -> Result<Self, AcpError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut cmd = Command::new(program);
        cmd.args(args);
        Self::spawn_command(cmd, program)
    }

    /// Start a shell command line with `/bin/sh -c`.
    ///
    /// # Errors
    ///
    /// [`AcpError::Spawn`] when the process could not be started.
    pub fn spawn_shell(command: &str) -> Result<Self, AcpError> {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(command);
        Self::spawn_command(cmd, command)
    }

    /// Start a prepared command (stdio and the process group are set here).
    ///
    /// # Errors
    ///
    /// [`AcpError::Spawn`] when the process could not be started.
    pub fn spawn_command(mut cmd: Command, display: &str) -> Result<Self, AcpError> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| AcpError::Spawn {
            command: display.to_owned(),
            reason: e.to_string(),
        })?;
        let pid = child.id().ok_or_else(|| AcpError::Spawn {
            command: display.to_owned(),
            reason: "the process exited before its pid was read".to_owned(),
        })?;
        Ok(Self {
            pid,
            stdin: Mutex::new(child.stdin.take()),
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            child: Mutex::new(child),
        })
    }
}

fn reader_stream<R: tokio::io::AsyncRead + Send + Unpin + 'static>(r: R) -> ByteStream {
    tokio_util::io::ReaderStream::with_capacity(r, 64 * 1024)
        .map(|r| r.map_err(|e| AcpError::process("reading output", e)))
        .boxed()
}

impl AgentProcess for LocalProcess {
    fn pid(&self) -> u32 {
        self.pid
    }

    fn take_stdout(&mut self) -> Option<ByteStream> {
        self.stdout.take().map(reader_stream)
    }

    fn take_stderr(&mut self) -> Option<ByteStream> {
        self.stderr.take().map(reader_stream)
    }

    fn write_stdin(&self, data: Bytes) -> BoxFuture<'_, Result<(), AcpError>> {
        Box::pin(async move {
            let mut guard = self.stdin.lock().await;
            let stdin = guard
                .as_mut()
                .ok_or_else(|| AcpError::closed("stdin was closed"))?;
            crate::framing::write_and_flush(stdin, &data, "writing to the agent's stdin").await
        })
    }

    fn close_stdin(&self) -> BoxFuture<'_, Result<(), AcpError>> {
        Box::pin(async move {
            if let Some(mut s) = self.stdin.lock().await.take() {
                let _ = s.shutdown().await;
            }
            Ok(())
        })
    }

    fn kill(&self) -> BoxFuture<'_, Result<bool, AcpError>> {
        Box::pin(async move { Ok(kill_group(self.pid)) })
    }

    fn kill_now(self: std::sync::Arc<Self>) {
        kill_group(self.pid);
    }

    fn wait(&self) -> BoxFuture<'_, Result<ProcessExit, AcpError>> {
        Box::pin(async move {
            let status = self
                .child
                .lock()
                .await
                .wait()
                .await
                .map_err(|e| AcpError::process("waiting for the agent", e))?;
            use std::os::unix::process::ExitStatusExt;
            Ok(ProcessExit {
                code: status.code(),
                signal: status.signal(),
            })
        })
    }
}

/// SIGKILL to a process group; "no such group" is fine (already gone). True when it was sent.
pub(crate) fn kill_group(pgid: u32) -> bool {
    let Ok(pgid) = i32::try_from(pgid) else {
        return false;
    };
    match nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pgid),
        nix::sys::signal::Signal::SIGKILL,
    ) {
        Ok(()) => true,
        Err(nix::errno::Errno::ESRCH) => false,
        Err(e) => {
            tracing::warn!(pgid, error = %e, "could not kill the agent's process group");
            false
        }
    }
}
