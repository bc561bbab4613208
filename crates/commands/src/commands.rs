//! `Commands`: the Process service, E2B style.

use std::time::Duration;

use bytes::Bytes;
use e2b_envd_client::{CallOptions, DEFAULT_KEEPALIVE_INTERVAL, EnvdConnection, Feature};
use e2b_envd_proto::process::process_event::Event;
use e2b_envd_proto::process::{
    ConnectRequest, ConnectResponse, ListRequest, ProcessConfig, Pty, StartRequest, StartResponse,
    pty,
};
use futures::StreamExt as _;
use tokio::time::Instant;

use crate::error::CommandError;
use crate::handle::{Attach, CommandHandle};
use crate::options::{
    CommandLine, CommandOptions, ConnectOptions, DEFAULT_COMMAND_TIMEOUT, DEFAULT_REQUEST_TIMEOUT,
    ProcessInfo, ProcessSelector, PtySize, Signal,
};
use crate::output::CommandOutput;
use crate::rpc::ProcessRpc;
use crate::state::ProcessEvents;
use crate::stdin::StdinWriter;

/// envd's server-streaming Process RPCs, read with `EnvdConnection::server_streaming` (no copy
/// of the output on its way to the callbacks).
const START_PATH: &str = "/process.Process/Start";
const CONNECT_PATH: &str = "/process.Process/Connect";

/// The field paths of an output chunk in a `StartResponse` / `ConnectResponse`: `event` (1) →
/// `ProcessEvent.data` (2) → `DataEvent.stdout` / `stderr` / `pty` (1, 2, 3). A chunk that
/// spans several received frames is delivered as one event per frame, each a slice of it,
/// instead of being gathered with a copy (chunk boundaries carry no meaning).
fn is_output_payload(path: &[u32]) -> bool {
    matches!(path, [1, 2, 1..=3])
}

/// A response of a process stream (`Start`, `Connect`): each carries one process event.
trait ProcessResponse: prost::Message + Default + Send + 'static {
    fn into_event(self) -> Option<Event>;
}

impl ProcessResponse for StartResponse {
    fn into_event(self) -> Option<Event> {
        self.event.and_then(|e| e.event)
    }
}

impl ProcessResponse for ConnectResponse {
    fn into_event(self) -> Option<Event> {
        self.event.and_then(|e| e.event)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Run,
    Start,
    Streaming,
}

/// Runs and manages commands in one sandbox, over its envd connection. Cheap to clone.
///
/// ```no_run
/// # async fn demo(conn: e2b_envd_client::EnvdConnection) -> Result<(), e2b_commands::CommandError>
/// {
/// use e2b_commands::{Commands, CommandOptions};
/// let commands = Commands::new(conn);
/// let out = commands.run("echo hello; exit 3", CommandOptions::new()).await?;
/// assert_eq!(out.stdout, "hello\n");
/// assert_eq!(out.exit_code, 3); // exit status is data
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Commands {
    /// The connection and the per-process RPCs (shared with handles and stdin writers).
    rpc: ProcessRpc,
}

impl Commands {
    /// Commands over `conn`.
    pub fn new(conn: EnvdConnection) -> Self {
        Self {
            rpc: ProcessRpc::new(conn, DEFAULT_REQUEST_TIMEOUT),
        }
    }

    /// Sets the default request timeout of every call (zero = none). Command options can
    /// override it per command.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.rpc = self.rpc.with_request_timeout(timeout);
        self
    }

    /// The connection.
    pub fn connection(&self) -> &EnvdConnection {
        self.rpc.connection()
    }

    /// Runs `cmd` and waits for it to end. A non-zero exit is data in the returned
    /// [`CommandOutput`] (unless [`CommandOptions::check`] is set); output is retained.
    /// The command timeout defaults to 60 s (E2B's); zero = none.
    ///
    /// A string runs as `/bin/bash -l -c <cmd>`; pass [`CommandLine::exec`] for no shell.
    ///
    /// # Errors
    ///
    /// envd's answer as a [`CommandError`](crate::CommandError) variant: `NotFound` for an unknown
    /// pid, `SandboxUnavailable` when the sandbox is gone, `Transport` when it cannot be reached,
    /// `Authentication` for a refused token; `RequestTimeout` when envd does not start the command
    /// in time; `DeadlineExceeded` when the command timeout killed it; `Exit` for a failed command
    /// only with [`CommandOptions::check`](crate::CommandOptions::check).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does **not** kill the command: once envd started it, it runs until it
    /// ends or its command timeout (60 s by default) expires, as with envd's own clients. Kill it
    /// by pid ([`Commands::list`] shows it) if you need it gone.
    pub async fn run(
        &self,
        cmd: impl Into<CommandLine>,
        opts: CommandOptions,
    ) -> Result<CommandOutput, CommandError> {
        let check = opts.check;
        let handle = self.spawn(cmd.into(), opts, Mode::Run).await?;
        let out = handle.wait().await?;
        if check { out.check() } else { Ok(out) }
    }

    /// Starts `cmd` in the background and returns its handle, which retains output (E2B's
    /// `background: true`). The command timeout defaults to 60 s, after which envd kills the
    /// process; use [`CommandOptions::no_timeout`] for a long-lived process. Stdin is closed
    /// unless [`CommandOptions::stdin`] opens it.
    ///
    /// # Errors
    ///
    /// envd's answer as a [`CommandError`](crate::CommandError) variant: `NotFound` for an unknown
    /// pid, `SandboxUnavailable` when the sandbox is gone, `Transport` when it cannot be reached,
    /// `Authentication` for a refused token; `RequestTimeout` when envd does not start the command
    /// in time; `UnsupportedFeature` when an option needs a newer envd.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after envd started the process, the process keeps running (until
    /// its command timeout) and no handle reaches it; find it with [`Commands::list`].
    pub async fn start(
        &self,
        cmd: impl Into<CommandLine>,
        opts: CommandOptions,
    ) -> Result<CommandHandle, CommandError> {
        self.spawn(cmd.into(), opts, Mode::Start).await
    }

    /// Starts a long-lived command whose output goes only to callbacks and the handle's event
    /// stream: by default no output is retained, stdin is open and there is no command timeout.
    /// With no callbacks the event stream ([`CommandHandle::take_events`]) sees every event
    /// from the start. Output is never dropped: a slow consumer slows the process down.
    ///
    /// # Errors
    ///
    /// envd's answer as a [`CommandError`](crate::CommandError) variant: `NotFound` for an unknown
    /// pid, `SandboxUnavailable` when the sandbox is gone, `Transport` when it cannot be reached,
    /// `Authentication` for a refused token; `RequestTimeout` when envd does not start the command
    /// in time; `UnsupportedFeature` when an option needs a newer envd.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after envd started the process, the process keeps running (it has
    /// no command timeout by default) and no handle reaches it; find it with [`Commands::list`] and
    /// kill it.
    pub async fn start_streaming(
        &self,
        cmd: impl Into<CommandLine>,
        opts: CommandOptions,
    ) -> Result<CommandHandle, CommandError> {
        self.spawn(cmd.into(), opts, Mode::Streaming).await
    }

    async fn spawn(
        &self,
        cmd: CommandLine,
        opts: CommandOptions,
        mode: Mode,
    ) -> Result<CommandHandle, CommandError> {
        let version = self.rpc.connection().envd_version();
        let default_stdin = mode == Mode::Streaming;
        let stdin = match opts.stdin {
            Some(false) => {
                // Older envds always open stdin; asking for none must fail, not be ignored.
                self.rpc.connection().require(Feature::Stdin)?;
                Some(false)
            }
            Some(true) => Some(true),
            None if version.supports(Feature::Stdin) => Some(default_stdin),
            None => None,
        };
        let timeout = opts.timeout.unwrap_or(match mode {
            Mode::Run | Mode::Start => DEFAULT_COMMAND_TIMEOUT,
            Mode::Streaming => Duration::ZERO,
        });
        let retain = opts.retain_output.unwrap_or(mode != Mode::Streaming);
        let has_callbacks = opts.on_stdout.is_some() || opts.on_stderr.is_some();
        let events_from_start = opts.events.unwrap_or(!retain && !has_callbacks);

        let (program, args) = cmd.to_process();
        let request = StartRequest {
            process: Some(ProcessConfig {
                cmd: program,
                args,
                envs: opts.envs.clone(),
                cwd: opts.cwd.clone(),
            }),
            pty: opts.pty.map(|s| Pty {
                size: Some(pty::Size {
                    cols: s.cols,
                    rows: s.rows,
                }),
            }),
            tag: opts.tag.clone(),
            stdin,
        };
        let mut call = CallOptions::streaming()
            .deadline(timeout)
            .keepalive(opts.keepalive.unwrap_or(DEFAULT_KEEPALIVE_INTERVAL));
        if let Some(user) = &opts.user {
            call = call.user(user);
        }
        let req = self.rpc.connection().request(request, &call)?;
        let request_timeout = opts.request_timeout.unwrap_or(self.rpc.request_timeout());
        let (pid, events) = self
            .open::<_, StartResponse>(START_PATH, req, request_timeout)
            .await?;
        Ok(CommandHandle::spawn(
            self.rpc.clone(),
            Attach {
                pid,
                is_pty: opts.pty.is_some(),
                retain,
                on_stdout: opts.on_stdout,
                on_stderr: opts.on_stderr,
                events_from_start,
                follow_until: None,
            },
            events,
        ))
    }

    /// Opens a Start/Connect stream and reads its start event, all within the request timeout.
    /// Opens a process stream (`Start` or `Connect`) and reads it up to the start event, within
    /// the request timeout.
    async fn open<Req, Resp>(
        &self,
        path: &'static str,
        req: tonic::Request<Req>,
        request_timeout: Duration,
    ) -> Result<(u32, ProcessEvents), CommandError>
    where
        Req: prost::Message + Send + 'static,
        Resp: ProcessResponse,
    {
        let conn = self.rpc.connection();
        let fut = async {
            let stream = conn
                .server_streaming::<Req, Resp>(path, req)
                .await
                .map_err(CommandError::from)?
                .split_payloads(is_output_payload);
            let mut events: ProcessEvents = stream.map(|r| r.map(Resp::into_event)).boxed();
            loop {
                match events.next().await {
                    Some(Ok(Some(Event::Start(s)))) => return Ok((s.pid, events)),
                    Some(Ok(Some(Event::Keepalive(_)) | None)) => continue,
                    Some(Ok(Some(_))) => {
                        return Err(CommandError::protocol(
                            "expected the start event first on the process stream",
                        ));
                    }
                    Some(Err(status)) => return Err(CommandError::from(status)),
                    None => {
                        return Err(CommandError::protocol(
                            "the process stream ended before the start event",
                        ));
                    }
                }
            }
        };
        match self.rpc.with_timeout(request_timeout, fut).await {
            Err(e) => Err(self.rpc.classify(e).await),
            ok => ok,
        }
    }

    /// Reattaches to a running process by pid or tag. Output produced while nobody was attached
    /// is not replayed (envd keeps none). Unknown → [`CommandError::NotFound`].
    ///
    /// # Errors
    ///
    /// envd's answer as a [`CommandError`](crate::CommandError) variant: `NotFound` for an unknown
    /// pid, `SandboxUnavailable` when the sandbox is gone, `Transport` when it cannot be reached,
    /// `Authentication` for a refused token; `RequestTimeout` when envd does not answer in time.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is changed by an unfinished call. The process is not affected either
    /// way.
    pub async fn connect(
        &self,
        selector: impl Into<ProcessSelector>,
        opts: ConnectOptions,
    ) -> Result<CommandHandle, CommandError> {
        let selector = selector.into();
        let call = CallOptions::streaming()
            .without_user()
            .keepalive(opts.keepalive.unwrap_or(DEFAULT_KEEPALIVE_INTERVAL));
        let req = self.rpc.connection().request(
            ConnectRequest {
                process: Some(selector.to_proto()),
            },
            &call,
        )?;
        let request_timeout = opts.request_timeout.unwrap_or(self.rpc.request_timeout());
        let (pid, events) = self
            .open::<_, ConnectResponse>(CONNECT_PATH, req, request_timeout)
            .await?;
        let retain = opts.retain_output.unwrap_or(true);
        let has_callbacks = opts.on_stdout.is_some() || opts.on_stderr.is_some();
        // envd does not say whether a process has a terminal; use `send_pty_input` for one.
        let is_pty = false;
        Ok(CommandHandle::spawn(
            self.rpc.clone(),
            Attach {
                pid,
                is_pty,
                retain,
                on_stdout: opts.on_stdout,
                on_stderr: opts.on_stderr,
                events_from_start: opts.events.unwrap_or(!retain && !has_callbacks),
                follow_until: opts
                    .timeout
                    .filter(|t| !t.is_zero())
                    .map(|t| (Instant::now() + t, t)),
            },
            events,
        ))
    }

    /// The running processes.
    ///
    /// # Errors
    ///
    /// envd's answer as a [`CommandError`](crate::CommandError) variant: `NotFound` for an unknown
    /// pid, `SandboxUnavailable` when the sandbox is gone, `Transport` when it cannot be reached,
    /// `Authentication` for a refused token.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is changed by an unfinished call.
    pub async fn list(&self) -> Result<Vec<ProcessInfo>, CommandError> {
        let req = self
            .rpc
            .connection()
            .request(ListRequest {}, &CallOptions::default().without_user())?;
        let mut client = self.rpc.connection().process();
        let resp = self.rpc.unary(client.list(req)).await?;
        Ok(resp
            .processes
            .into_iter()
            .map(|p| {
                let config = p.config.unwrap_or_default();
                ProcessInfo {
                    pid: p.pid,
                    tag: p.tag,
                    cmd: config.cmd,
                    args: config.args,
                    envs: config.envs,
                    cwd: config.cwd,
                }
            })
            .collect())
    }

    /// Kills a process (SIGKILL; our daemon signals its whole process group). `Ok(false)` when
    /// no such process exists.
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
    pub async fn kill(&self, pid: u32) -> Result<bool, CommandError> {
        self.signal(pid, Signal::Kill).await
    }

    /// Sends a signal to a process. `Ok(false)` when no such process exists.
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
    pub async fn signal(&self, pid: u32, signal: Signal) -> Result<bool, CommandError> {
        self.rpc.signal(pid, signal).await
    }

    /// Writes to a process's stdin. It must have been started with stdin open
    /// ([`CommandOptions::stdin`]; `start_streaming` opens it by default).
    ///
    /// # Errors
    ///
    /// envd's answer as a [`CommandError`](crate::CommandError) variant: `NotFound` for an unknown
    /// pid, `SandboxUnavailable` when the sandbox is gone, `Transport` when it cannot be reached,
    /// `Authentication` for a refused token; `InvalidArgument` when the process's stdin is closed
    /// or was never opened.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the request was sent, envd may or may not have applied it;
    /// check before retrying. The data may have been written.
    pub async fn send_stdin(&self, pid: u32, data: impl Into<Bytes>) -> Result<(), CommandError> {
        self.rpc.send_input(pid, data.into(), false).await
    }

    /// A writer for a process's stdin over one open `StreamInput` stream: a write is one message
    /// on the stream instead of a `SendInput` request, for low latency and ordered delivery.
    /// See [`StdinWriter`]. For a PTY process use [`CommandHandle::stdin_writer`].
    pub fn stdin_writer(&self, pid: u32) -> StdinWriter {
        StdinWriter::new(self.rpc.clone(), pid, false)
    }

    /// Writes to a PTY process's terminal.
    ///
    /// # Errors
    ///
    /// envd's answer as a [`CommandError`](crate::CommandError) variant: `NotFound` for an unknown
    /// pid, `SandboxUnavailable` when the sandbox is gone, `Transport` when it cannot be reached,
    /// `Authentication` for a refused token; `InvalidArgument` when the process has no PTY.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the request was sent, envd may or may not have applied it;
    /// check before retrying. The data may have been written.
    pub async fn send_pty_input(
        &self,
        pid: u32,
        data: impl Into<Bytes>,
    ) -> Result<(), CommandError> {
        self.rpc.send_input(pid, data.into(), true).await
    }

    /// Closes a process's stdin (EOF). Needs envd 0.5.2 or newer: on an older envd this fails
    /// with [`CommandError::UnsupportedFeature`] and nothing is sent.
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
    pub async fn close_stdin(&self, pid: u32) -> Result<(), CommandError> {
        self.rpc.close_stdin(pid).await
    }

    /// Resizes a PTY process's terminal.
    ///
    /// # Errors
    ///
    /// envd's answer as a [`CommandError`](crate::CommandError) variant: `NotFound` for an unknown
    /// pid, `SandboxUnavailable` when the sandbox is gone, `Transport` when it cannot be reached,
    /// `Authentication` for a refused token; `InvalidArgument` when the process has no PTY.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the request was sent, envd may or may not have applied it;
    /// check before retrying.
    pub async fn resize_pty(&self, pid: u32, size: PtySize) -> Result<(), CommandError> {
        self.rpc.resize_pty(pid, size).await
    }
}
