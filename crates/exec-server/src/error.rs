//! The crate's error type.

use std::net::SocketAddr;

/// Everything that can go wrong while starting or running the exec server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecServerError {
    /// The configuration is inconsistent (for example a zero output cap or a bad address).
    #[error("invalid exec-server configuration: {0}")]
    Config(String),

    /// The sandbox could not be reached or created.
    #[error(
        "could not open the sandbox: {0}; check --sandbox URL and the access token, or drop --sandbox to use the embedded local sandbox"
    )]
    Sandbox(String),

    /// The HTTP listener could not be bound.
    #[error("could not listen on {addr}: {source}; pick another address with --http or PORT")]
    Bind {
        /// The address that was asked for.
        addr: SocketAddr,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// An I/O error on the server's own transport (stdin/stdout or the HTTP socket).
    #[error("exec-server transport I/O error: {0}")]
    Io(#[from] std::io::Error),

    /// The MCP session could not be set up or ended abnormally.
    #[error("MCP session failed: {0}")]
    Mcp(String),
}

/// A failure inside the sandbox seam: the sandbox could not run a command or move a file.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub(crate) struct BackendError {
    pub(crate) message: String,
}

impl BackendError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// The kind of a failed file operation, named like DeepAgents' `FileOperationError` literals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileErrorKind {
    /// `file_not_found`
    FileNotFound,
    /// `permission_denied`
    PermissionDenied,
    /// `is_directory`
    IsDirectory,
    /// `invalid_path`
    InvalidPath,
}

impl FileErrorKind {
    /// The DeepAgents literal.
    pub(crate) fn literal(self) -> &'static str {
        match self {
            Self::FileNotFound => "file_not_found",
            Self::PermissionDenied => "permission_denied",
            Self::IsDirectory => "is_directory",
            Self::InvalidPath => "invalid_path",
        }
    }
}

/// A failed file operation: a literal when the cause is one DeepAgents knows, and a message.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub(crate) struct FileError {
    pub(crate) kind: Option<FileErrorKind>,
    pub(crate) message: String,
}

impl FileError {
    pub(crate) fn new(kind: FileErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind: Some(kind),
            message: message.into(),
        }
    }

    pub(crate) fn other(message: impl Into<String>) -> Self {
        Self {
            kind: None,
            message: message.into(),
        }
    }
}

impl From<BackendError> for FileError {
    fn from(e: BackendError) -> Self {
        FileError::other(e.message)
    }
}
