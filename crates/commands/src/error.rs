//! The one error type of this crate.

use std::sync::Arc;

use e2b_envd_client::{EnvdError, RpcCode, UnsupportedFeature};

/// What a failing callback returns.
pub type CallbackError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A command ended with a non-zero exit code or a signal, and the caller asked for that to be an
/// error ([`CommandOutput::check`](crate::CommandOutput::check) or
/// [`CommandOptions::check`](crate::CommandOptions::check)). Carries everything the command
/// produced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", exit_message(self))]
#[non_exhaustive]
pub struct CommandExitError {
    /// The exit code (`-1` when a signal ended the process).
    pub exit_code: i32,
    /// The signal that ended the process, if one did.
    pub signal: Option<i32>,
    /// The retained standard output (empty when output was not retained).
    pub stdout: String,
    /// The retained standard error (empty when output was not retained).
    pub stderr: String,
    /// envd's error text, such as `exit status 1` or `signal: killed`.
    pub error: Option<String>,
}

impl CommandExitError {
    /// Builds the error.
    pub fn new(
        exit_code: i32,
        signal: Option<i32>,
        stdout: String,
        stderr: String,
        error: Option<String>,
    ) -> Self {
        Self {
            exit_code,
            signal,
            stdout,
            stderr,
            error,
        }
    }
}

fn exit_message(e: &CommandExitError) -> String {
    let what = match e.signal {
        Some(sig) => format!("command was killed by signal {sig}"),
        None => format!("command exited with code {}", e.exit_code),
    };
    let tail = e.stderr.trim_end();
    let tail = if tail.len() > 2000 {
        let mut cut = tail.len() - 2000;
        while !tail.is_char_boundary(cut) {
            cut += 1;
        }
        &tail[cut..]
    } else {
        tail
    };
    if tail.is_empty() {
        format!(
            "{what} (the exit status is also in CommandOutput: use wait()/run() without check() to treat it as data)"
        )
    } else {
        format!("{what}; stderr:\n{tail}")
    }
}

/// Everything that can go wrong running a command. Each message says what happened and what to
/// do about it.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// No process with that pid or tag (envd's `not_found`).
    #[error(
        "process not found: {message}. It may have exited already (envd keeps an exited process only briefly); list running processes with Commands::list()"
    )]
    NotFound {
        /// envd's message.
        message: String,
    },
    /// envd rejected an argument: a `cwd` that does not exist, an unknown user, a command that
    /// could not start, stdin that is closed.
    #[error(
        "invalid argument: {message}. Check the command's cwd, user, tag and options (stdin must be enabled with CommandOptions::stdin(true) to send input)"
    )]
    InvalidArgument {
        /// envd's message.
        message: String,
    },
    /// The access token or the user was refused.
    #[error(
        "authentication failed: {message}. Check the sandbox access token (E2B_ACCESS_TOKEN) and that the user exists in the sandbox"
    )]
    Authentication {
        /// envd's message.
        message: String,
    },
    /// envd cannot be reached: the sandbox was probably killed or reached its end of life.
    #[error(
        "the sandbox is unavailable: {message}. The sandbox was probably killed or reached its end of life; create a new sandbox (or extend its timeout) and run the command again"
    )]
    SandboxUnavailable {
        /// What happened.
        message: String,
    },
    /// envd did not answer (for a command: did not send the start event) within the request
    /// timeout. The command may or may not have started.
    #[error(
        "request timed out: envd did not answer within {timeout_ms} ms (the request timeout). Raise CommandOptions::request_timeout, or check that the sandbox is running"
    )]
    RequestTimeout {
        /// The request timeout that expired.
        timeout_ms: u64,
    },
    /// The command timeout expired. For a command started here, envd killed the process (and its
    /// process group).
    #[error(
        "command timeout exceeded: {message}. Raise CommandOptions::timeout, or use Duration::ZERO for no timeout (start_streaming has none by default)"
    )]
    DeadlineExceeded {
        /// What happened.
        message: String,
    },
    /// Too many requests.
    #[error("rate limited: {message}. Retry later or send fewer concurrent requests")]
    RateLimited {
        /// envd's message.
        message: String,
    },
    /// The command ended with a non-zero exit code or a signal and the caller asked for that to
    /// be an error.
    #[error(transparent)]
    Exit(CommandExitError),
    /// The call needs a newer envd than the sandbox runs. Nothing was sent.
    #[error(transparent)]
    UnsupportedFeature(UnsupportedFeature),
    /// The connection to envd failed below the RPC layer, or the endpoint is malformed.
    #[error(
        "transport error talking to envd: {message}. Check the sandbox URL and that envd is reachable"
    )]
    Transport {
        /// What happened.
        message: String,
        /// The underlying error, when there is one (an invalid endpoint has none).
        #[source]
        source: Option<Arc<EnvdError>>,
    },
    /// An output callback returned an error. Reading of the output stopped there; the process
    /// keeps running.
    #[error(
        "the {stream} callback failed: {source}. Output reading stopped and the process keeps running; kill it with CommandHandle::kill() or reattach with Commands::connect()"
    )]
    Callback {
        /// `on_stdout` or `on_stderr`.
        stream: &'static str,
        /// The callback's error.
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The handle was disconnected before the command ended. The process keeps running.
    #[error(
        "the handle of process {pid} was disconnected before the command ended; the process keeps running: reattach with Commands::connect({pid}) or kill it with Commands::kill({pid})"
    )]
    Disconnected {
        /// The process id.
        pid: u32,
    },
    /// The output stream ended without the command's exit status.
    #[error(
        "the output stream of process {pid} ended without an exit status; the connection to envd was lost. Reattach with Commands::connect({pid}) to see if it still runs"
    )]
    NoExitStatus {
        /// The process id.
        pid: u32,
    },
    /// envd answered in a way this client does not expect (a protocol mismatch).
    #[error(
        "unexpected answer from envd: {message}. The sandbox's envd may be incompatible with this client; check its envd version"
    )]
    Protocol {
        /// What was wrong.
        message: String,
    },
    /// The call was cancelled by envd or a proxy.
    #[error("cancelled: {message}. The request was cancelled by the server or a proxy; retry it")]
    Cancelled {
        /// envd's message.
        message: String,
    },
    /// envd answered with another error status.
    #[error("envd error ({code:?}): {message}")]
    Rpc {
        /// The status code.
        code: RpcCode,
        /// envd's message.
        message: String,
    },
}

impl CommandError {
    /// Whether this is [`CommandError::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }

    /// The exit code, when this is [`CommandError::Exit`].
    pub fn exit_code(&self) -> Option<i32> {
        match self {
            Self::Exit(e) => Some(e.exit_code),
            _ => None,
        }
    }

    pub(crate) fn callback(stream: &'static str, source: CallbackError) -> Self {
        Self::Callback {
            stream,
            source: Arc::from(source),
        }
    }

    pub(crate) fn protocol(message: impl Into<String>) -> Self {
        Self::Protocol {
            message: message.into(),
        }
    }
}

impl From<EnvdError> for CommandError {
    fn from(e: EnvdError) -> Self {
        match e {
            EnvdError::NotFound { message } => Self::NotFound { message },
            EnvdError::InvalidArgument { message } | EnvdError::IsDirectory { message } => {
                Self::InvalidArgument { message }
            }
            EnvdError::Authentication { message } => Self::Authentication { message },
            EnvdError::SandboxUnavailable { message } => Self::SandboxUnavailable { message },
            EnvdError::RateLimited { message } => Self::RateLimited { message },
            EnvdError::RequestTimeout { timeout_ms } => Self::RequestTimeout { timeout_ms },
            EnvdError::DeadlineExceeded { message } => Self::DeadlineExceeded { message },
            EnvdError::Cancelled { message } => Self::Cancelled { message },
            EnvdError::UnsupportedFeature(u) => Self::UnsupportedFeature(u),
            e @ EnvdError::Transport { .. } => Self::Transport {
                message: e.to_string(),
                source: Some(Arc::new(e)),
            },
            EnvdError::PermissionDenied { message } => Self::Rpc {
                code: RpcCode::PermissionDenied,
                message,
            },
            EnvdError::AlreadyExists { message } => Self::Rpc {
                code: RpcCode::AlreadyExists,
                message,
            },
            EnvdError::Rpc { code, message } => Self::Rpc { code, message },
            other => Self::Transport {
                message: other.to_string(),
                source: Some(Arc::new(other)),
            },
        }
    }
}

impl From<tonic::Status> for CommandError {
    fn from(s: tonic::Status) -> Self {
        EnvdError::from(s).into()
    }
}

impl From<UnsupportedFeature> for CommandError {
    fn from(u: UnsupportedFeature) -> Self {
        Self::UnsupportedFeature(u)
    }
}

impl From<CommandExitError> for CommandError {
    fn from(e: CommandExitError) -> Self {
        Self::Exit(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envd_errors_map_to_variants() {
        let e: CommandError = tonic::Status::not_found("process with pid 9 not found").into();
        assert!(e.is_not_found());
        assert!(e.to_string().contains("Commands::list()"));
        let e: CommandError = tonic::Status::unavailable("gone").into();
        assert!(matches!(e, CommandError::SandboxUnavailable { .. }));
        let e: CommandError = tonic::Status::deadline_exceeded("late").into();
        assert!(e.to_string().contains("Duration::ZERO"));
        let e: CommandError = tonic::Status::resource_exhausted("slow down").into();
        assert!(matches!(e, CommandError::RateLimited { .. }));
        let e: CommandError = tonic::Status::unauthenticated("bad token").into();
        assert!(matches!(e, CommandError::Authentication { .. }));
        let e: CommandError = tonic::Status::invalid_argument("cwd").into();
        assert!(matches!(e, CommandError::InvalidArgument { .. }));
    }

    #[test]
    fn exit_error_message_shows_stderr() {
        let e = CommandExitError::new(2, None, "out".into(), "boom\n".into(), None);
        let s = CommandError::from(e).to_string();
        assert!(s.contains("code 2"), "{s}");
        assert!(s.contains("boom"), "{s}");
    }
}
