//! The crate's error type.

/// What can go wrong when starting `e2b serve` or one of its sandboxes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// A listener could not be bound (address in use, permission denied, ...).
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
    /// A sandbox's envd could not be started or initialised.
    #[error("cannot start the sandbox's envd: {0}")]
    Spawn(String),
    /// Pausing, resuming or killing a sandbox's processes failed.
    #[error("sandbox process control failed: {0}")]
    Control(String),
    /// The configuration is invalid.
    #[error("invalid e2b serve configuration: {0}")]
    Config(String),
    /// Any other I/O error.
    #[error("e2b serve I/O error: {0}")]
    Io(#[from] std::io::Error),
}
