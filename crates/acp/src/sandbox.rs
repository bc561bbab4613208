//! The agent as a command in the sandbox, over `e2b_commands::Commands::start_streaming`
//! (stdin open, no output retained, no command timeout).

use bytes::Bytes;
use e2b_commands::{
    CommandHandle, CommandLine, CommandOptions, Commands, OutputCallback, StdinWriter,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;
use tokio::sync::{Mutex, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use crate::agent::{AcpAgent, ClientBuilder};
use crate::error::AcpError;
use crate::options::AcpOptions;
use crate::process::{AgentProcess, ByteStream, ProcessExit};
use crate::transport::{AcpTransport, AgentExit};
use agent_client_protocol::{
    Agent, HandleConnectionClose, HandleDispatchFrom, RunWithConnectionTo,
};

/// Chunks buffered between the command's output callbacks and the transport's reader. The
/// reader's own read queue ([`crate::DEFAULT_READ_QUEUE_DEPTH`]) is what bounds memory; this only
/// decouples stdout from stderr.
const CHUNK_BUFFER: usize = 16;

/// Anything that gives access to a sandbox's commands API: the `e2b` facade's `Sandbox`, or
/// `e2b_commands::Commands` itself.
pub trait SandboxCommands {
    /// The commands API of the sandbox.
    fn sandbox_commands(&self) -> &Commands;
}

impl SandboxCommands for Commands {
    fn sandbox_commands(&self) -> &Commands {
        self
    }
}

impl SandboxCommands for e2b::Sandbox {
    fn sandbox_commands(&self) -> &Commands {
        self.commands()
    }
}

impl<T: SandboxCommands + ?Sized> SandboxCommands for &T {
    fn sandbox_commands(&self) -> &Commands {
        (**self).sandbox_commands()
    }
}

fn sandbox_err(action: &'static str) -> impl FnOnce(e2b_commands::CommandError) -> AcpError {
    move |e| AcpError::Sandbox {
        action,
        source: Box::new(e),
    }
}

/// An agent command running in a sandbox.
pub struct SandboxProcess {
    handle: CommandHandle,
    /// The agent's stdin: one `StreamInput` stream kept open (one message per write), with
    /// `SendInput` as the fallback where streaming is not available.
    stdin: StdinWriter,
    stdout: Option<mpsc::Receiver<Result<Bytes, AcpError>>>,
    stderr: Option<mpsc::Receiver<Result<Bytes, AcpError>>>,
    exit: Mutex<mpsc::Receiver<Result<ProcessExit, AcpError>>>,
    /// Set once the command's exit was observed: dropping the process kills it until then.
    exited: Arc<AtomicBool>,
}

impl Drop for SandboxProcess {
    fn drop(&mut self) {
        if self.exited.load(Ordering::Acquire) {
            return;
        }
        let handle = self.handle.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = handle.kill().await {
                    tracing::warn!(error = %e, "could not kill a dropped sandbox agent");
                }
            });
        }
    }
}

impl std::fmt::Debug for SandboxProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxProcess")
            .field("pid", &self.handle.pid())
            .finish_non_exhaustive()
    }
}

impl SandboxProcess {
    /// Start `command` (a shell line, or `CommandLine::exec(program, args)`) in the sandbox with
    /// `start_streaming`: stdin open, no output retained, no command timeout. Dropping the
    /// returned process before its exit was observed kills it.
    ///
    /// # Errors
    ///
    /// [`AcpError::Spawn`] when the sandbox could not start the command.
    ///
    /// # Cancel safety
    ///
    /// Once this returns the process is owned (dropped means killed); a future dropped while the
    /// sandbox is starting the command relies on `e2b-commands` for what it already started.
    pub async fn start(
        sandbox: &(impl SandboxCommands + ?Sized),
        command: impl Into<CommandLine>,
        opts: &AcpOptions,
    ) -> Result<Self, AcpError> {
        let command = command.into();
        let (out_tx, out_rx) = mpsc::channel::<Result<Bytes, AcpError>>(CHUNK_BUFFER);
        let (err_tx, err_rx) = mpsc::channel::<Result<Bytes, AcpError>>(CHUNK_BUFFER);
        let (exit_tx, exit_rx) = mpsc::channel(1);
        // Output goes straight from the command's reader task into the transport's channels
        // (async callbacks, awaited before the next chunk is read: back-pressure is kept), one
        // task hop less per message than an event stream demultiplexed by another task. A
        // consumer that is gone is ignored, so the reader runs to the exit.
        let on_stdout = {
            let tx = out_tx.clone();
            OutputCallback::bytes_async(move |b: Bytes| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(Ok(b)).await;
                }
            })
        };
        let on_stderr = OutputCallback::bytes_async(move |b: Bytes| {
            let tx = err_tx.clone();
            async move {
                let _ = tx.send(Ok(b)).await;
            }
        });
        let mut copts = CommandOptions::new()
            .stdin(true)
            .retain_output(false)
            .no_timeout()
            .events(false)
            .on_stdout(on_stdout)
            .on_stderr(on_stderr);
        if let Some(cwd) = &opts.cwd {
            copts = copts.cwd(cwd.clone());
        }
        if let Some(user) = &opts.user {
            copts = copts.user(user.clone());
        }
        if let Some(t) = opts.request_timeout {
            copts = copts.request_timeout(t);
        }
        copts = copts.envs(opts.envs.clone());
        let display = format!("{command:?}");
        let handle = sandbox
            .sandbox_commands()
            .start_streaming(command, copts)
            .await
            .map_err(|e| AcpError::Spawn {
                command: display.clone(),
                reason: e.to_string(),
            })?;
        let exited = Arc::new(AtomicBool::new(false));
        tokio::spawn(watch_exit(handle.clone(), out_tx, exit_tx, exited.clone()));
        Ok(Self {
            exited,
            stdin: handle.stdin_writer(),
            handle,
            stdout: Some(out_rx),
            stderr: Some(err_rx),
            exit: Mutex::new(exit_rx),
        })
    }
}

/// Waits for the command's outcome (known only after its reader delivered every chunk through
/// the callbacks), reports a failure on stdout after the data, and passes the exit on. stdout
/// ends when this and the reader's callback are both done.
async fn watch_exit(
    handle: CommandHandle,
    out_tx: mpsc::Sender<Result<Bytes, AcpError>>,
    exit_tx: mpsc::Sender<Result<ProcessExit, AcpError>>,
    exited: Arc<AtomicBool>,
) {
    let exit = match handle.wait().await {
        Ok(out) => Ok({
            exited.store(true, Ordering::Release);
            if out.status.exited {
                ProcessExit::code(out.status.exit_code)
            } else {
                ProcessExit {
                    code: None,
                    signal: out.status.signal,
                }
            }
        }),
        Err(e) => {
            let msg = e.to_string();
            let _ = out_tx
                .send(Err(AcpError::process("reading the agent's output", &msg)))
                .await;
            Err(AcpError::Sandbox {
                action: "following the agent command",
                source: Box::new(e),
            })
        }
    };
    drop(out_tx);
    drop(handle);
    let _ = exit_tx.send(exit).await;
}

impl AgentProcess for SandboxProcess {
    fn pid(&self) -> u32 {
        self.handle.pid()
    }

    fn take_stdout(&mut self) -> Option<ByteStream> {
        self.stdout
            .take()
            .map(|rx| Box::pin(ReceiverStream::new(rx)) as ByteStream)
    }

    fn take_stderr(&mut self) -> Option<ByteStream> {
        self.stderr
            .take()
            .map(|rx| Box::pin(ReceiverStream::new(rx)) as ByteStream)
    }

    fn write_stdin(&self, data: Bytes) -> BoxFuture<'_, Result<(), AcpError>> {
        Box::pin(async move {
            self.stdin
                .write(data)
                .await
                .map_err(sandbox_err("writing to the agent's stdin"))
        })
    }

    fn close_stdin(&self) -> BoxFuture<'_, Result<(), AcpError>> {
        Box::pin(async move {
            // Everything written is delivered before the EOF.
            self.stdin.close().await.map_err(|e| match e {
                e2b_commands::CommandError::UnsupportedFeature(u) => AcpError::Unsupported {
                    feature: "closing the agent's stdin (EOF)",
                    required: u.required.to_string(),
                    actual: u.actual.to_string(),
                },
                e => sandbox_err("closing the agent's stdin")(e),
            })
        })
    }

    fn kill(&self) -> BoxFuture<'_, Result<bool, AcpError>> {
        Box::pin(async move {
            self.handle
                .kill()
                .await
                .map_err(sandbox_err("killing the agent"))
        })
    }

    fn wait(&self) -> BoxFuture<'_, Result<ProcessExit, AcpError>> {
        Box::pin(async move {
            let mut rx = self.exit.lock().await;
            rx.recv()
                .await
                .unwrap_or_else(|| Err(AcpError::closed("the agent's exit was already taken")))
        })
    }
}

/// Start `command` in the sandbox and connect the official ACP client `client` to it.
///
/// `client` is `agent_client_protocol::Client.v1()` with your handlers. The agent's `fs/*` and
/// `terminal/*` requests never reach them (answered with -32601 in the transport), and the
/// client's `fs` and `terminal` capabilities are sent as `false`.
///
/// # Errors
///
/// [`AcpError::InvalidOptions`] for out-of-range options, [`AcpError::Spawn`] when the command
/// could not start, and the errors of [`AcpAgent::connect`].
///
/// # Cancel safety
///
/// Dropping the future after the agent started kills it.
pub async fn connect_acp_agent<S, H, R, C>(
    sandbox: &S,
    command: impl Into<CommandLine>,
    client: ClientBuilder<H, R, C>,
    opts: AcpOptions,
) -> Result<AcpAgent, AcpError>
where
    S: SandboxCommands + ?Sized,
    H: HandleDispatchFrom<Agent> + 'static,
    R: RunWithConnectionTo<Agent> + 'static,
    C: HandleConnectionClose<Agent> + 'static,
{
    opts.validate()?;
    let process = SandboxProcess::start(sandbox, command, &opts).await?;
    AcpAgent::connect(process, client, opts).await
}

/// Start `command` in the sandbox and return the raw JSON-lines transport (with the same rewrite
/// and interception as [`connect_acp_agent`]).
///
/// # Errors
///
/// [`AcpError::InvalidOptions`] for out-of-range options, [`AcpError::Spawn`] when the command
/// could not start.
///
/// # Cancel safety
///
/// Dropping the future after the agent started kills it.
pub async fn start_acp_transport<S>(
    sandbox: &S,
    command: impl Into<CommandLine>,
    opts: AcpOptions,
) -> Result<AcpTransport, AcpError>
where
    S: SandboxCommands + ?Sized,
{
    opts.validate()?;
    let process = SandboxProcess::start(sandbox, command, &opts).await?;
    AcpTransport::start(process, &opts)
}

/// The `e2b acp` bridge: serve ACP on `input`/`output` (the editor) with the real agent started
/// as `command` in the sandbox. Returns when the agent ends; at EOF on `input` the agent is
/// stopped within `opts.stop_timeout`.
///
/// # Errors
///
/// The errors of [`start_acp_transport`] and [`run_bridge`](crate::run_bridge).
///
/// # Cancel safety
///
/// Dropping the future kills the agent.
pub async fn run_bridge_in_sandbox<S, I, O>(
    sandbox: &S,
    command: impl Into<CommandLine>,
    input: I,
    output: O,
    opts: AcpOptions,
) -> Result<AgentExit, AcpError>
where
    S: SandboxCommands + ?Sized,
    I: tokio::io::AsyncRead + Unpin + Send,
    O: tokio::io::AsyncWrite + Unpin + Send,
{
    let stop_timeout = opts.stop_timeout;
    let transport = start_acp_transport(sandbox, command, opts).await?;
    crate::bridge::run_bridge(input, output, transport, stop_timeout).await
}
