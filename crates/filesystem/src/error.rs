//! What can go wrong with a file operation, as types a caller can match on.

use e2b_envd_client::{EnvdError, UnsupportedFeature};

/// An error from a [`Filesystem`](crate::Filesystem) call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FilesystemError {
    /// The file or directory does not exist (RPC `not_found`, HTTP 404).
    #[error("not found: {message}")]
    NotFound {
        /// envd's message.
        message: String,
    },
    /// The path is a directory where a file was expected (reading or writing a directory).
    #[error("is a directory: {message}")]
    IsDirectory {
        /// envd's message.
        message: String,
    },
    /// The operation is not allowed: outside the daemon's root, or the OS refused it
    /// (RPC `permission_denied`, HTTP 403).
    #[error("permission denied: {message}")]
    PermissionDenied {
        /// envd's message.
        message: String,
    },
    /// The path or another argument was refused (RPC `invalid_argument` /
    /// `failed_precondition`, HTTP 400): a path that is not a directory, a bad `~user`
    /// expansion, a symlink loop, invalid metadata, a corrupt gzip body.
    #[error("invalid path or argument: {message}")]
    InvalidArgument {
        /// envd's message.
        message: String,
    },
    /// The thing to create already exists (`already_exists`).
    #[error("already exists: {message}")]
    AlreadyExists {
        /// envd's message.
        message: String,
    },
    /// The sandbox's disk is full (HTTP 507). Free space or use a bigger sandbox.
    #[error("not enough disk space in the sandbox: {message}. Free some space and retry")]
    NotEnoughSpace {
        /// envd's message.
        message: String,
    },
    /// The access token, signature or user was refused (RPC `unauthenticated`, HTTP 401).
    #[error(
        "authentication failed: {message}. Check the sandbox access token and that the user exists"
    )]
    Authentication {
        /// envd's message.
        message: String,
    },
    /// The call needs a newer envd than the sandbox runs. Nothing was sent.
    #[error(transparent)]
    UnsupportedFeature(#[from] UnsupportedFeature),
    /// Another error from envd's RPCs or from reaching it.
    #[error(transparent)]
    Envd(EnvdError),
    /// Another HTTP error from `/files`.
    #[error("envd answered HTTP {status}: {message}")]
    Http {
        /// The HTTP status.
        status: u16,
        /// envd's message.
        message: String,
    },
    /// The HTTP request to `/files` failed below HTTP (connection refused, reset, ...).
    #[error("transport error talking to envd's /files: {message}")]
    Transport {
        /// What happened, with the chain of causes.
        message: String,
        /// The HTTP client's error.
        #[source]
        source: reqwest::Error,
    },
    /// A local I/O error (reading the local file to upload, writing a download).
    #[error("local I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The answer could not be understood.
    #[error("unexpected answer from envd: {0}")]
    Protocol(String),
    /// Data did not decode as expected (a file read as text is not UTF-8, envd's upload answer
    /// is not the JSON it should be); the source is the decoder's error.
    #[error("{message}: {source}")]
    Decode {
        /// What was being decoded.
        message: String,
        /// The decoder's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl FilesystemError {
    /// Whether this is [`FilesystemError::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }

    /// Maps a `/files` HTTP error answer (`{"code": <status>, "message": "..."}`).
    pub(crate) fn from_http(status: u16, body: &[u8]) -> Self {
        let message = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| {
                v.get("message")
                    .and_then(|m| m.as_str())
                    .map(str::to_string)
            })
            .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
        match status {
            404 => Self::NotFound { message },
            400 | 416 => EnvdError::invalid_argument(message).into(),
            401 => Self::Authentication { message },
            403 => Self::PermissionDenied { message },
            507 => Self::NotEnoughSpace { message },
            _ => Self::Http { status, message },
        }
    }
}

impl FilesystemError {
    /// An error that ended a download body: the HTTP client's, when it is one (a stream of
    /// `/files` carries it inside an `io::Error`), else a local I/O error.
    pub(crate) fn from_body(e: std::io::Error) -> Self {
        let is_http = e
            .get_ref()
            .is_some_and(|inner| inner.is::<reqwest::Error>());
        if !is_http {
            return Self::Io(e);
        }
        match e
            .into_inner()
            .map(|inner| inner.downcast::<reqwest::Error>())
        {
            Some(Ok(http)) => (*http).into(),
            Some(Err(other)) => Self::Io(std::io::Error::other(other)),
            None => Self::Protocol("a download body failed without a cause".into()),
        }
    }
}

impl From<EnvdError> for FilesystemError {
    fn from(e: EnvdError) -> Self {
        match e {
            EnvdError::NotFound { message } => Self::NotFound { message },
            EnvdError::IsDirectory { message } => Self::IsDirectory { message },
            EnvdError::InvalidArgument { message } => Self::InvalidArgument { message },
            EnvdError::PermissionDenied { message } => Self::PermissionDenied { message },
            EnvdError::AlreadyExists { message } => Self::AlreadyExists { message },
            EnvdError::Authentication { message } => Self::Authentication { message },
            EnvdError::UnsupportedFeature(f) => Self::UnsupportedFeature(f),
            other => Self::Envd(other),
        }
    }
}

impl From<tonic::Status> for FilesystemError {
    fn from(s: tonic::Status) -> Self {
        EnvdError::from(s).into()
    }
}

impl From<reqwest::Error> for FilesystemError {
    fn from(e: reqwest::Error) -> Self {
        let mut msg = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            msg.push_str(": ");
            msg.push_str(&s.to_string());
            src = s.source();
        }
        Self::Transport {
            message: msg,
            source: e,
        }
    }
}

/// Result of a filesystem call.
pub type Result<T, E = FilesystemError> = std::result::Result<T, E>;
