//! The per-process RPCs (signal, input, close stdin, resize) and the call plumbing they share
//! (request timeout, the "sandbox gone" probe). [`Commands`](crate::Commands), a
//! [`CommandHandle`](crate::CommandHandle) and a [`StdinWriter`](crate::StdinWriter) each hold a
//! [`ProcessRpc`] instead of one another.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use bytes::Bytes;
use e2b_envd_client::{CallOptions, EnvdConnection, Feature};
use e2b_envd_proto::process::{
    CloseStdinRequest, ProcessInput, SendInputRequest, SendSignalRequest, UpdateRequest,
    process_input, pty,
};

use crate::error::CommandError;
use crate::options::{ProcessSelector, PtySize, Signal};

/// How long the health probe after a lost connection may take (E2B's 5 s).
const HEALTH_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether envd serves `StreamInput`, learned once per [`Commands`](crate::Commands) (per connection):
/// 0 = not known yet, [`SUPPORTED`] or [`UNSUPPORTED`].
#[derive(Debug, Default)]
pub(crate) struct StreamSupport(AtomicU8);

pub(crate) const SUPPORTED: u8 = 1;
pub(crate) const UNSUPPORTED: u8 = 2;

impl StreamSupport {
    pub(crate) fn get(&self) -> u8 {
        self.0.load(Ordering::Acquire)
    }

    pub(crate) fn set(&self, v: u8) {
        self.0.store(v, Ordering::Release);
    }
}

/// One connection's per-process RPCs. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct ProcessRpc {
    conn: EnvdConnection,
    request_timeout: Duration,
    /// Whether envd serves `StreamInput` (probed by the first [`StdinWriter`](crate::StdinWriter)
    /// write), shared by every clone.
    stream_support: Arc<StreamSupport>,
}

impl ProcessRpc {
    pub(crate) fn new(conn: EnvdConnection, request_timeout: Duration) -> Self {
        Self {
            conn,
            request_timeout,
            stream_support: Arc::default(),
        }
    }

    pub(crate) fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    pub(crate) fn connection(&self) -> &EnvdConnection {
        &self.conn
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    pub(crate) fn stream_support(&self) -> &StreamSupport {
        &self.stream_support
    }

    /// `fut` bounded by `timeout` (zero = none), as [`CommandError::RequestTimeout`].
    pub(crate) async fn with_timeout<T>(
        &self,
        timeout: Duration,
        fut: impl Future<Output = Result<T, CommandError>>,
    ) -> Result<T, CommandError> {
        if timeout.is_zero() {
            return fut.await;
        }
        match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(CommandError::RequestTimeout {
                timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            }),
        }
    }

    /// A transport failure while envd is gone becomes [`CommandError::SandboxUnavailable`].
    pub(crate) async fn classify(&self, err: CommandError) -> CommandError {
        match err {
            CommandError::Transport { .. } if self.sandbox_gone().await => {
                CommandError::SandboxUnavailable {
                    message: "envd is not answering; the sandbox is not running".to_owned(),
                }
            }
            other => other,
        }
    }

    /// A unary call within the request timeout, its errors classified.
    pub(crate) async fn unary<T>(
        &self,
        fut: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, CommandError> {
        let res = self
            .with_timeout(self.request_timeout, async {
                fut.await
                    .map(tonic::Response::into_inner)
                    .map_err(CommandError::from)
            })
            .await;
        match res {
            Err(e) => Err(self.classify(e).await),
            ok => ok,
        }
    }

    /// Sends `signal` to `pid`; `Ok(false)` when no such process exists.
    pub(crate) async fn signal(&self, pid: u32, signal: Signal) -> Result<bool, CommandError> {
        let req = self.conn.request(
            SendSignalRequest {
                process: Some(ProcessSelector::Pid(pid).to_proto()),
                signal: signal.to_proto() as i32,
            },
            &CallOptions::default().without_user(),
        )?;
        let mut client = self.conn.process();
        match self.unary(client.send_signal(req)).await {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Writes to `pid`'s stdin (or its terminal, with `pty`) with one `SendInput` request.
    pub(crate) async fn send_input(
        &self,
        pid: u32,
        data: Bytes,
        pty: bool,
    ) -> Result<(), CommandError> {
        let input = if pty {
            process_input::Input::Pty(data)
        } else {
            process_input::Input::Stdin(data)
        };
        let req = self.conn.request(
            SendInputRequest {
                process: Some(ProcessSelector::Pid(pid).to_proto()),
                input: Some(ProcessInput { input: Some(input) }),
            },
            &CallOptions::default().without_user(),
        )?;
        let mut client = self.conn.process();
        self.unary(client.send_input(req)).await.map(|_| ())
    }

    /// Closes `pid`'s stdin (envd 0.5.2 or newer; nothing is sent to an older one).
    pub(crate) async fn close_stdin(&self, pid: u32) -> Result<(), CommandError> {
        self.conn.require(Feature::CloseStdin)?;
        let req = self.conn.request(
            CloseStdinRequest {
                process: Some(ProcessSelector::Pid(pid).to_proto()),
            },
            &CallOptions::default().without_user(),
        )?;
        let mut client = self.conn.process();
        self.unary(client.close_stdin(req)).await.map(|_| ())
    }

    /// Resizes `pid`'s terminal.
    pub(crate) async fn resize_pty(&self, pid: u32, size: PtySize) -> Result<(), CommandError> {
        let req = self.conn.request(
            UpdateRequest {
                process: Some(ProcessSelector::Pid(pid).to_proto()),
                pty: Some(e2b_envd_proto::process::Pty {
                    size: Some(pty::Size {
                        cols: size.cols,
                        rows: size.rows,
                    }),
                }),
            },
            &CallOptions::default().without_user(),
        )?;
        let mut client = self.conn.process();
        self.unary(client.update(req)).await.map(|_| ())
    }

    /// Whether envd is clearly gone (E2B's health probe after a lost connection): `GET /health`
    /// cannot connect or answers 502.
    pub(crate) async fn sandbox_gone(&self) -> bool {
        let url = format!("{}/health", self.conn.url());
        match tokio::time::timeout(HEALTH_PROBE_TIMEOUT, self.conn.http().get(url).send()).await {
            Ok(Ok(resp)) => resp.status().as_u16() == 502,
            Ok(Err(e)) => e.is_connect(),
            Err(_) => false,
        }
    }
}
