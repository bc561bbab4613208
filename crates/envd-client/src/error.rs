//! What can go wrong talking to envd, in terms a sandbox user can act on.

use e2b_envd_version::UnsupportedFeature;

/// A gRPC / Connect status code, as envd reports it.
pub type RpcCode = tonic::Code;

/// An error from envd or from reaching it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnvdError {
    /// The process, file or watcher does not exist (`not_found`).
    #[error("not found: {message}")]
    NotFound {
        /// envd's message.
        message: String,
    },
    /// envd rejected an argument (`invalid_argument`, `failed_precondition`, `out_of_range`):
    /// a missing cwd, a path that is not a directory, a command that could not start.
    #[error("invalid argument: {message}")]
    InvalidArgument {
        /// envd's message.
        message: String,
    },
    /// The access token or the user was refused (`unauthenticated`). Check the sandbox's access
    /// token and that the user exists in the sandbox.
    #[error(
        "authentication failed: {message}. Check the sandbox access token and that the user exists in the sandbox"
    )]
    Authentication {
        /// envd's message.
        message: String,
    },
    /// The operation is not allowed (`permission_denied`).
    #[error("permission denied: {message}")]
    PermissionDenied {
        /// envd's message.
        message: String,
    },
    /// The thing to create already exists (`already_exists`).
    #[error("already exists: {message}")]
    AlreadyExists {
        /// envd's message.
        message: String,
    },
    /// envd is unreachable (`unavailable`): the sandbox was probably killed or reached its end of
    /// life. Create or resume a sandbox.
    #[error(
        "the sandbox is unavailable: {message}. It was probably killed or reached its end of life; create a new sandbox or extend its timeout"
    )]
    SandboxUnavailable {
        /// envd's message.
        message: String,
    },
    /// Too many requests (`resource_exhausted`). Retry later or lower concurrency.
    #[error("rate limited: {message}. Retry later or send fewer concurrent requests")]
    RateLimited {
        /// envd's message.
        message: String,
    },
    /// The client gave up waiting for envd to answer (before a stream opened).
    #[error(
        "request timed out after {timeout_ms} ms waiting for envd to answer. Raise the request timeout or check that the sandbox is running"
    )]
    RequestTimeout {
        /// How long the client waited.
        timeout_ms: u64,
    },
    /// The deadline sent with the call expired (`deadline_exceeded`). On a command this is the
    /// command timeout: envd killed the process. Raise the timeout, or pass zero for none.
    #[error(
        "deadline exceeded: {message}. The command timeout expired and the process was killed; raise the timeout or use zero for no timeout"
    )]
    DeadlineExceeded {
        /// envd's message.
        message: String,
    },
    /// The call was cancelled by the server or a proxy (`canceled`).
    #[error("cancelled: {message}")]
    Cancelled {
        /// envd's message.
        message: String,
    },
    /// The call needs a newer envd. Nothing was sent.
    #[error(transparent)]
    UnsupportedFeature(#[from] UnsupportedFeature),
    /// envd answered with another status.
    #[error("envd error ({code:?}): {message}")]
    Rpc {
        /// The status code.
        code: RpcCode,
        /// envd's message.
        message: String,
    },
    /// The endpoint is malformed (bad URL, header value, TLS roots).
    #[error("invalid endpoint: {message}")]
    InvalidEndpoint {
        /// What is wrong, and how to fix it.
        message: String,
        /// The parser's or TLS library's error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },
    /// The connection failed below the RPC layer (refused, reset, TLS, a body cut short).
    #[error("transport error talking to envd: {message}")]
    Transport {
        /// What happened, with the chain of causes.
        message: String,
        /// The status the RPC layer reported; its own `source()` leads to the I/O error.
        #[source]
        source: Box<tonic::Status>,
    },
    /// The path names a directory where envd needs a file (`invalid_argument` with envd's
    /// "is a directory" message).
    #[error("is a directory: {message}")]
    IsDirectory {
        /// envd's message.
        message: String,
    },
}

impl EnvdError {
    /// The gRPC / Connect code this error corresponds to, if it came from envd.
    pub fn code(&self) -> Option<RpcCode> {
        Some(match self {
            Self::NotFound { .. } => RpcCode::NotFound,
            Self::InvalidArgument { .. } | Self::IsDirectory { .. } => RpcCode::InvalidArgument,
            Self::Authentication { .. } => RpcCode::Unauthenticated,
            Self::PermissionDenied { .. } => RpcCode::PermissionDenied,
            Self::AlreadyExists { .. } => RpcCode::AlreadyExists,
            Self::SandboxUnavailable { .. } => RpcCode::Unavailable,
            Self::RateLimited { .. } => RpcCode::ResourceExhausted,
            Self::DeadlineExceeded { .. } => RpcCode::DeadlineExceeded,
            Self::Cancelled { .. } => RpcCode::Cancelled,
            Self::Rpc { code, .. } => *code,
            _ => return None,
        })
    }

    /// Whether this is `not_found`.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }

    /// [`EnvdError::InvalidEndpoint`] with no underlying error.
    pub(crate) fn invalid_endpoint(message: impl Into<String>) -> Self {
        Self::InvalidEndpoint {
            message: message.into(),
            source: None,
        }
    }

    /// [`EnvdError::InvalidEndpoint`] caused by `source`.
    pub(crate) fn invalid_endpoint_from(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::InvalidEndpoint {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }
}

/// envd's messages that refine a status code, matched here and nowhere else: envd reports these
/// cases with a code shared by other failures.
mod envd_messages {
    /// `invalid_argument`: the path is a directory (`/files`, `Stat` of a file operation).
    pub(super) const IS_A_DIRECTORY: &str = "is a directory";
    /// `internal`: writing to a process whose stdin is closed or was never opened.
    pub(super) const STDIN_CLOSED: &str = "stdin not enabled or closed";
    /// `internal` from tonic-web: the connection broke in the middle of a body.
    pub(super) const GRPC_WEB_BODY_CUT: &str = "tonic-web: error reading";
}

impl EnvdError {
    /// Classifies an `invalid_argument` message of envd.
    pub fn invalid_argument(message: String) -> Self {
        if message.contains(envd_messages::IS_A_DIRECTORY) {
            Self::IsDirectory { message }
        } else {
            Self::InvalidArgument { message }
        }
    }
}

impl From<tonic::Status> for EnvdError {
    fn from(status: tonic::Status) -> Self {
        let message = status.message().to_owned();
        match status.code() {
            RpcCode::NotFound => Self::NotFound { message },
            RpcCode::InvalidArgument | RpcCode::FailedPrecondition | RpcCode::OutOfRange => {
                Self::invalid_argument(message)
            }
            // A misuse the caller can fix (open stdin, or do not write after closing it).
            RpcCode::Internal if message.contains(envd_messages::STDIN_CLOSED) => {
                Self::InvalidArgument { message }
            }
            RpcCode::Internal if message.starts_with(envd_messages::GRPC_WEB_BODY_CUT) => {
                Self::Transport {
                    message,
                    source: Box::new(status),
                }
            }
            RpcCode::Unauthenticated => Self::Authentication { message },
            RpcCode::PermissionDenied => Self::PermissionDenied { message },
            RpcCode::AlreadyExists => Self::AlreadyExists { message },
            RpcCode::Unavailable => Self::SandboxUnavailable { message },
            RpcCode::ResourceExhausted => Self::RateLimited { message },
            RpcCode::DeadlineExceeded => Self::DeadlineExceeded { message },
            RpcCode::Cancelled => Self::Cancelled { message },
            // A transport failure surfaces as `unknown` with the source attached.
            RpcCode::Unknown if std::error::Error::source(&status).is_some() => Self::Transport {
                message: format!("{message}: {}", source_chain(&status)),
                source: Box::new(status),
            },
            code => Self::Rpc { code, message },
        }
    }
}

fn source_chain(err: &dyn std::error::Error) -> String {
    let mut out = String::new();
    let mut cur = err.source();
    while let Some(e) = cur {
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&e.to_string());
        cur = e.source();
    }
    out
}

#[cfg(test)]
mod classification_tests {
    use super::*;

    #[test]
    fn envd_messages_refine_codes_in_one_place() {
        let e = EnvdError::from(tonic::Status::invalid_argument(
            "path '/tmp' is a directory",
        ));
        assert!(matches!(e, EnvdError::IsDirectory { .. }), "{e:?}");
        assert_eq!(e.code(), Some(RpcCode::InvalidArgument));
        let e = EnvdError::from(tonic::Status::internal(
            "error writing to stdin: stdin not enabled or closed",
        ));
        assert!(matches!(e, EnvdError::InvalidArgument { .. }), "{e:?}");
        let e = EnvdError::from(tonic::Status::internal("tonic-web: error reading body"));
        assert!(matches!(e, EnvdError::Transport { .. }), "{e:?}");
        assert!(std::error::Error::source(&e).is_some());
        let e = EnvdError::from(tonic::Status::internal("something else"));
        assert!(matches!(e, EnvdError::Rpc { .. }), "{e:?}");
    }
}
