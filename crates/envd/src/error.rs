//! The crate's error type.

/// What can go wrong when starting or running the daemon. (The client crate's error is
/// `e2b_envd_client::EnvdError`; this one is the daemon's.)
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DaemonError {
    /// The listener could not be bound (address in use, permission denied, ...).
    #[error(
        "cannot listen on {addr}: {source}. Pick another port (0 = any free port) or stop the process using it"
    )]
    Bind {
        /// The address we tried to bind.
        addr: std::net::SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The configuration is invalid.
    #[error("invalid envd configuration: {0}")]
    Config(String),
    /// Any other I/O error while serving.
    #[error("envd I/O error: {0}")]
    Io(#[from] std::io::Error),
}
